"""An adopted instance stays adopted when the `up` that imported it fails after the import.

The import lands in the state at its step; the config the program exports (which names the
adoption) only at the end of a run that succeeds. The next `up` must still treat the instance
as adopted: the inputs the cloud never reports back (hostname, password, ...) were never set
on it, and planning them now would reinstall it (hostname: `ResetInstance`) or replace it.
"""

import uuid
from pathlib import Path

import pytest

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.launches import fast_launch
from spotpool.engine.stacks.stack import PoolStack
from tests.engine._support.fast_launch import preview_expecting_no_changes, up_and_reclaim
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration
PASSWORD = "Sp0t-pool-pw!"


def _pool(world: EngineWorld) -> PoolStack:
    """Real orphan rules (15 min): only the launch intent makes the instance adoptable."""
    settings = world.settings.model_copy(update={"orphan_min_age": 900.0})
    identity = PoolIdentity(namespace="team-a", name="gpu", uid=str(uuid.uuid4()))
    return PoolStack(identity, settings, world.credentials, REGION, world.progress.append)


def _calls(world: EngineWorld, action: str) -> int:
    path = f"/_emulator/requests?action={action}"
    return len(world.emulator.admin_ok("GET", path)["Requests"])


# Without user data the next plan was an update of hostname: `ResetInstance` (a reinstall;
# the emulator answers InvalidAction); with it, a replacement (userDataRaw forces one).
@pytest.mark.parametrize("user_data", [{}, {"userData": "#!/bin/sh\necho storm\n"}])
def test_an_instance_adopted_by_a_failed_up_is_not_reset_by_the_next(
    world: EngineWorld, tmp_path: Path, user_data: dict[str, str]
) -> None:
    stack = _pool(world)
    config = world.config(stack, 2, **user_data)
    up_and_reclaim(world, stack, config, 1)
    launched = fast_launch.launch_replacements(stack, config, [1], login_password=PASSWORD)
    fast_id = launched.instances[1]

    # The up that adopts slot 1 also scales up, and the new slot's create fails (a fault the
    # cloud answers at once, neither retried nor a lack of stock): the run fails after the
    # import was recorded, before the program's exports were.
    fault = {"Action": "RunInstances", "Code": "InvalidParameterValue", "LatencyMs": 3000}
    world.emulator.admin_ok("POST", "/_emulator/faults", fault)
    bigger = world.config(stack, 3, **user_data)
    with pytest.raises(EngineError, match="InvalidParameterValue"):
        stack.up(bigger, login_password=PASSWORD, refresh=True)
    assert stack.state_instance_ids().get(1) == fast_id  # the import was recorded
    world.emulator.admin_ok("DELETE", "/_emulator/faults")
    created = _calls(world, "RunInstances")
    # A preview plans as the next up does: slot 2 created, the adopted instance left alone.
    planned = stack.preview(bigger, login_password=PASSWORD).instance_changes
    assert planned is not None and (planned.create, planned.same) == (1, 2), planned

    # The next up creates slot 2 and leaves the adopted instance exactly as it is.
    again = stack.up(bigger, login_password=PASSWORD, refresh=True)
    assert {i.slot: i.instance_id for i in again.instances}[1] == fast_id
    assert again.changes.update == 0 and again.changes.delete == 0, again.changes
    assert _calls(world, "ResetInstance") == 0
    assert _calls(world, "RunInstances") == created + 1  # slot 2's create alone
    shown = preview_expecting_no_changes(world, stack, tmp_path)  # the plain CLI, as a person
    assert "5 unchanged" in shown, shown
