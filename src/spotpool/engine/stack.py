"""One Spotpool's Pulumi stack: up, refresh, preview and destroy through the Automation API.

Every operation takes the stack's in-process lock (one operation per stack at a time), first
repairs what a killed run left behind (see recovery.py), and returns a typed result.
Credentials travel only as environment variables of the Pulumi run.
"""

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pulumi import automation as auto

from spotpool.api.notices import NONCE_TAG, SURGE_SUFFIX
from spotpool.api.stackconfig import (
    PROJECT,
    USER_DATA_FINGERPRINT,
    PoolIdentity,
    StackConfig,
)
from spotpool.engine import (
    api_proxy,
    cloud_errors,
    config_crypt,
    config_file,
    launch_intents,
    recovery,
)
from spotpool.engine.backend_files import checkpoint_exists, open_backend, write_new_stack
from spotpool.engine.credentials import Credentials
from spotpool.engine.disruption import replaced_slots
from spotpool.engine.errors import (
    EngineError,
    InstancesRemain,
    OperationTimeout,
    StackLockedError,
)
from spotpool.engine.events import EventPrinter
from spotpool.engine.lean_stack import LeanStack
from spotpool.engine.notice_nonces import held_nonces, plan_nonces
from spotpool.engine.orphans import waited_for
from spotpool.engine.processes import FencedCommand, check_fence, kill_runs
from spotpool.engine.program import load_program
from spotpool.engine.results import (
    OperationKind,
    OperationResult,
    SlotOutput,
    changes_by_resource,
    changes_from_summary,
)
from spotpool.engine.settings import EngineSettings
from spotpool.engine.urns import slot_of_urn

if TYPE_CHECKING:  # fast_launch imports this module
    from spotpool.engine.fast_launch import FastLaunch

__all__ = ["EngineError", "OperationTimeout", "PoolStack", "StackLockedError"]
SLOT_TYPE = "tencentcloud:Instance/instance:Instance"
T = TypeVar("T")
# Where slots the cloud had no stock for go next (None: nowhere); the default tries the next type.
Replan = Callable[[StackConfig, list[int]], StackConfig | None]
_stack_locks: dict[str, threading.Lock] = {}
_stack_locks_guard = threading.Lock()


@dataclass
class _Known:
    """What this process knows of one stack between operations, so that an operation spawns
    only the Pulumi CLI runs it needs (each costs 0.2-0.4 s): the selected stack, whether it
    was repaired since this process started, the config and tags last set, the slots' URNs."""

    stack: LeanStack
    repaired: bool = False
    config: dict[str, str] | None = None
    tagged: bool = False
    urns: dict[int, str] = field(default_factory=dict)
    surges: dict[int, str] = field(default_factory=dict)  # slot -> its surge instance's id


_known: dict[tuple[str, str, str], _Known] = {}


def forget_stack(name: str) -> None:
    """Another process writes the stack from now on (its shard moved): drop what this one
    remembers of it, so its next operation selects and repairs it afresh."""
    for key in [key for key in list(_known) if key[0] == name]:
        _known.pop(key, None)


def _stack_lock(name: str) -> threading.Lock:
    with _stack_locks_guard:
        return _stack_locks.setdefault(name, threading.Lock())


@cache
def pulumi_command(root: Path) -> auto.PulumiCommand:
    if not (root / "bin" / "pulumi").exists():
        raise EngineError(f"no pulumi CLI at {root / 'bin'}: run `make toolchain`")
    return _command(root)


@cache
def _command(root: Path) -> auto.PulumiCommand:
    # One per CLI: making one runs `pulumi version` (0.2 CPU-s), and it holds nothing else.
    return FencedCommand(root=str(root))  # every launch passes the thread's fence first


def surge_slot_of_urn(urn: str) -> int | None:
    """Slot number from a surge instance's URN (`…::<pool>-slot-<i>-surge`)."""
    return slot_of_urn(urn.removesuffix(SURGE_SUFFIX)) if urn.endswith(SURGE_SUFFIX) else None


def _instance_step(event: auto.EngineEvent, steps: list[tuple[str, str]]) -> None:
    pre = event.resource_pre_event
    if pre is not None and pre.metadata.type == SLOT_TYPE:
        steps.append((pre.metadata.urn, str(pre.metadata.op.value)))


class PoolStack:
    def __init__(
        self,
        pool: PoolIdentity,
        settings: EngineSettings,
        credentials: Credentials,
        region: str,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.credentials = credentials
        self.region = region
        self.on_progress = on_progress
        self._dead_run_slots: frozenset[int] = frozenset()  # a killed run was creating these

    @property
    def name(self) -> str:
        return self.pool.stack_name

    # --- the four operations -------------------------------------------------------------

    def up(
        self,
        config: StackConfig,
        login_password: str | None = None,
        refresh: bool = False,
        replan: Replan | None = None,
        fresh: Iterable[int] = (),
        target: Sequence[str] = (),
    ) -> OperationResult:
        """Converge to `config`. When the cloud has no stock for a slot, `replan` places it
        elsewhere (by default: the next of `instanceTypes`) and the up runs again. `refresh`:
        look at the cloud first, in the same run (instances gone while nobody watched).
        `fresh`: slots whose instance is gone (their next one is a new generation).
        `target`: only these URNs (a rollout's batch, rollout.py); the rest stay as they are."""
        with self._operation(OperationKind.UP) as (stack, result, state):
            surging, slot_urns = _ids_by_surge(state), _slot_urns(state)
            if refresh and config.notice_agent is not None and slot_urns:
                # A slot the refresh drops gets its next instance in this run: refresh first,
                # so that instance is a new generation (notice_nonces), not the dropped one's.
                stack.refresh(color="never", show_secrets=False)
                state = _export(stack)
                surging, slot_urns, refresh = _ids_by_surge(state), _slot_urns(state), False
            launched = launch_intents.read_intent(self)  # the fast path's, to adopt (fast_launch)
            noticed = [slot_urns[s] for s in surging if s in slot_urns] if refresh else []
            if noticed := noticed + launched.stale_urns(slot_urns, _ids_by_slot(state)):
                # A surge's slot: a refresh inside the up would drop a taken instance and then
                # create a new one beside the surge; refresh first, so the surge takes the slot.
                # A fast-path launch's slot likewise: its reclaimed instance leaves first.
                stack.refresh(target=noticed, color="never", show_secrets=False)
                state = _export(stack)
                surging = _ids_by_surge(state)
            owned = _ids_by_slot(state)
            config = _carried_over(config, state, owned)
            surge, promote = surge_plan(set(owned), set(surging), config.count)
            launched = launched.without(promote)  # a surge instance takes these slots
            config = launched.placed(_pinned(config, _previous_config(state), promote), owned)
            orphans = recovery.sweep_orphans(
                self, config, owned, cap=config.count,
                dead_run_slots=self._dead_run_slots | frozenset(launched.free(owned)),
                held=frozenset(surging.values()) | launched.protected(owned),
            )  # fmt: skip
            config = config.adopting(orphans.adoptable)
            result.recovered += orphans.notes()
            nonces = plan_nonces(held_nonces(state), config.count, surge, promote, fresh)
            nonces.update(launched.nonces(orphans.adoptable))
            while True:
                self._set_config(
                    stack, config, login_password, surge=surge, promote=promote, nonces=nonces
                )
                try:
                    reply = stack.up(
                        on_event=self._printer(), color="never", suppress_outputs=True,
                        refresh=refresh, target=list(target) or None,
                    )  # fmt: skip
                    break
                except auto.CommandError as err:
                    config = _replanned(stack, config, err, range(config.count), replan, result)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.instances = instances_of(reply.outputs)
            result.surges = instances_of(reply.outputs, "surges")
            self._remember_urns(_export(stack))
            launch_intents.settle(self, launched, {i.slot: i.instance_id for i in result.instances})
        return result

    def launch_replacements(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> "FastLaunch":
        """The storm fast path: launch `slots`' next instances through the cloud API now;
        the next `up` (or `replace_slots`) adopts them (fast_launch.py)."""
        from spotpool.engine.fast_launch import launch_replacements

        return launch_replacements(self, config, slots, login_password)

    def replace_slots(
        self,
        config: StackConfig,
        slots: list[int],
        login_password: str | None = None,
        replan: Replan | None = None,
    ) -> OperationResult:
        """Replace the instances the cloud took from `slots`, in one Pulumi run: `up` with a
        refresh of just those slots (the refresh drops the gone instance from the state, the up
        creates its successor). No full refresh, no look at the other slots: the fleet probe
        already told which slots are gone. Falls back to a full `up` with a refresh when this
        process does not know the slots' URNs or has not repaired the stack yet."""
        known = _known.get(self._key())  # no select here: the operation mends first
        urns = [known.urns[s] for s in slots if s in known.urns] if known else []
        if (
            known is None
            or len(urns) != len(slots)
            or not known.repaired
            or not known.config
            or self.name in launch_intents.PENDING  # the fast path's instances: a full up adopts
        ):
            return self.up(config, login_password, refresh=True, replan=replan, fresh=slots)
        promote = sorted(s for s in slots if s in known.surges and s < config.count)
        with self._operation(OperationKind.UP, light=not promote) as (stack, result, state):
            if promote:  # the slot's instance is going: its surge instance takes the slot
                config = _pinned(config, _previous_config(state), promote)
                self._forget_resources(stack, [known.urns[s] for s in promote])
            surge = sorted(s for s in known.surges if s not in promote and s < config.count)
            refresh = len(promote) < len(slots)  # only the gone ones: the rest left already
            # What this process last set (the run it set them for succeeded, or it would have
            # forgotten): untargeted instances keep theirs; the gone slots' next are new.
            held = {**_last_nonces(known.config), **held_nonces(state)}
            nonces = plan_nonces(
                held, config.count, surge, promote, fresh=[s for s in slots if s not in promote]
            )
            if promote and refresh:  # a refresh cannot target a promoted slot's new name
                gone = [known.urns[s] for s in slots if s not in promote]
                stack.refresh(target=gone, color="never", show_secrets=False)
                refresh = False
            while True:
                self._set_config(
                    stack, config, login_password, surge=surge, promote=promote, nonces=nonces
                )
                try:
                    reply = stack.up(
                        target=urns,
                        refresh=refresh,
                        on_event=self._printer(),
                        color="never",
                        suppress_outputs=True,
                    )
                    break
                except auto.CommandError as err:  # no stock: the slots go elsewhere, same URNs
                    config = _replanned(stack, config, err, slots, replan, result)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.instances = instances_of(reply.outputs)
            result.surges = instances_of(reply.outputs, "surges")
            # A created or promoted instance keeps its slot's URN: the known URNs stay right.
            known.surges = {s.slot: s.instance_id for s in result.surges}
        return result

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        """Start the replacement of `slots` ahead of their reclaim (a termination notice came):
        one targeted `up` that creates a surge instance beside each slot's instance, which
        keeps running until the cloud takes it; `replace_slots` then promotes the surge
        instance into the slot. With no slot it can surge (none of `slots` has an instance in
        the state), no run at all: an untargeted up here would converge the whole pool.
        The config is carried over and pinned like any up's, so the config the stack records
        keeps every slot's placement, fallback and adoption."""
        known = _known.get(self._key())
        if known is not None and known.repaired and not set(slots) & set(known.urns):
            return OperationResult(kind=OperationKind.UP, stack=self.name, seconds=0.0)
        with self._operation(OperationKind.UP) as (stack, result, state):
            known = self._known()
            slots = sorted(s for s in slots if s in known.urns and s < config.count)
            if not slots:
                return result
            config = _carried_over(config, state, _ids_by_slot(state))
            config = _pinned(config, _previous_config(state), slots)
            surge = sorted({*slots, *(s for s in known.surges if s < config.count)})
            nonces = plan_nonces(held_nonces(state), config.count, surge)
            self._set_config(stack, config, login_password, surge=surge, promote=[], nonces=nonces)
            reply = stack.up(
                target=[known.urns[s] + SURGE_SUFFIX for s in slots],
                on_event=self._printer(),
                color="never",
                suppress_outputs=True,
            )
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.instances = instances_of(reply.outputs)
            result.surges = instances_of(reply.outputs, "surges")
            known.surges = {s.slot: s.instance_id for s in result.surges}
        return result

    def retire_surges(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        """Delete the surge instances of `slots` (their slot's instance outlived its notice: the
        reclaim never came), in one targeted `up`; the slots' own instances stay."""
        with self._operation(OperationKind.UP) as (stack, result, state):
            known = self._known()
            retiring = sorted(s for s in slots if s in known.surges and s in known.urns)
            keep = sorted(s for s in known.surges if s not in retiring and s < config.count)
            config = _pinned(config, _previous_config(state), sorted(known.surges))
            nonces = plan_nonces(held_nonces(state), config.count, keep)
            self._set_config(stack, config, login_password, surge=keep, promote=[], nonces=nonces)
            if retiring:
                reply = stack.up(
                    target=[known.urns[s] + SURGE_SUFFIX for s in retiring],
                    on_event=self._printer(),
                    color="never",
                    suppress_outputs=True,
                )
                result.changes = changes_from_summary(reply.summary.resource_changes)
                outputs = reply.outputs
            else:
                outputs = stack.outputs()
            result.instances = instances_of(outputs)
            result.surges = instances_of(outputs, "surges")
            known.surges = {s.slot: s.instance_id for s in result.surges}
        return result

    def refresh(self) -> OperationResult:
        with self._operation(OperationKind.REFRESH) as (stack, result, state):
            before = slots_in(state)
            reply = stack.refresh(on_event=self._printer(), color="never", show_secrets=False)
            exported = _export(stack)
            self._remember_urns(exported)
            after = slots_in(exported)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.gone_slots = sorted(slot for slot in before if slot not in after)
            owned = {slot: item.instance_id for slot, item in after.items()}
            previous = _previous_config(state)
            orphans = recovery.sweep_orphans(
                self, previous, owned, cap=previous.count if previous else len(owned),
                dead_run_slots=self._dead_run_slots,
                held=frozenset(_ids_by_surge(exported).values()),
            )  # fmt: skip
            result.orphan_slots = sorted(orphans.adoptable)
            result.recovered += orphans.notes("adopted by the next up")
            result.instances = [after[slot] for slot in sorted(after)]
        return result

    def preview(
        self,
        config: StackConfig,
        login_password: str | None = None,
        keep_secret_inputs: Sequence[str] = (),
    ) -> OperationResult:
        """What `up` with `config` would change, leaving no trace: the stack's config and state
        stay byte-identical (a throwaway workspace, no lock); a pool without a stack yet is
        previewed against an empty throwaway backend, so it shows as all-create.
        `keep_secret_inputs`: instance inputs (`password`, `userDataRaw`) that keep what the state
        holds (a preview copy's placeholders) instead of this run's: the unchanged secrets."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="spotpool-preview-") as tmp:
            work_dir = Path(tmp) / "workspace"
            work_dir.mkdir()
            settings_file = self._work_dir() / f"Pulumi.{self.name}.yaml"
            if settings_file.exists():  # keeps the stack's encryption salt
                shutil.copy2(settings_file, work_dir / settings_file.name)
            try:
                try:
                    stack = self._select(work_dir=work_dir, create=False)
                except auto.StackNotFoundError:
                    stack = self._select(work_dir=work_dir, backend=f"file://{tmp}")
                nonces = plan_nonces(held_nonces(_export(stack)), config.count)
                self._set_config(stack, config, login_password, tag=False, nonces=nonces)
                if keep_secret_inputs:
                    kept = auto.ConfigValue(json.dumps(sorted(keep_secret_inputs)))
                    stack.set_config(f"{PROJECT}:keepSecretInputs", kept)
                lines: list[str] = []
                steps: list[tuple[str, str]] = []  # (urn, op) of every instance's step
                reply = stack.preview(
                    diff=True,
                    color="never",
                    on_output=lines.append,
                    on_event=lambda event: _instance_step(event, steps),
                )
            except auto.CommandError as err:
                raise EngineError(f"preview of stack {self.name} failed: {_reason(err)}") from None
        return OperationResult(
            kind=OperationKind.PREVIEW,
            stack=self.name,
            changes=changes_from_summary(reply.change_summary),
            instance_changes=changes_by_resource(steps),
            replaced_slots=replaced_slots(steps),
            diff="\n".join(lines),
            seconds=round(time.monotonic() - started, 2),
        )

    def destroy(self, remove_stack: bool = True) -> OperationResult:
        with self._operation(OperationKind.DESTROY) as (stack, result, state):
            held = len(slots_in(state)) + len(_ids_by_surge(state))
            reply = stack.destroy(on_event=self._printer(), color="never")
            result.changes = changes_from_summary(reply.summary.resource_changes)
            # The state is empty now: any instance still tagged for the pool would leak.
            launched = launch_intents.read_intent(self)  # the fast path's go too, young or not
            orphans = recovery.sweep_orphans(
                self, None, {}, cap=held + len(launched.slots),
                dead_run_slots=self._dead_run_slots | frozenset(launched.slots),
            )  # fmt: skip
            result.recovered += orphans.notes()
            if remove_stack and (left := waited_for(orphans.left)):
                # Young ones may be a create in flight: keep the stack (it names the pool for
                # the next sweep) and let the caller come back once they are old enough.
                raise InstancesRemain(self.name, {d.instance_id: d.reason for d in left})
            launch_intents.forget(self)
            if remove_stack:
                stack.workspace.remove_stack(self.name)
                self._forget_known()
        return result

    def cancel(self) -> list[int]:
        """Kill this stack's running Pulumi CLI and everything under it (plugins included);
        the operation then fails, and the next one removes the lock the kill left."""
        return kill_runs(self.name)

    def forget(self) -> None:
        """Drop the stack but leave its instances running (deletionPolicy Retain)."""
        with _stack_lock(self.name):
            self._select().workspace.remove_stack(self.name, force=True)
            launch_intents.forget(self)  # the fast path's instances stay, as the others
            self._forget_known()

    def outputs(self) -> list[SlotOutput]:
        return instances_of(self._select().outputs())

    def applied_config(self) -> StackConfig | None:
        """The config the stack's last `up` applied (the program exports it), or None. Read
        straight from a self-managed backend's checkpoint when it can be (no CLI run: a
        restart over a thousand pools reads a thousand of them), else through the CLI."""
        with _stack_lock(self.name):
            checkpoint = recovery.read_checkpoint(self)
            if checkpoint is not None:
                return _previous_config(checkpoint)
            try:
                return _previous_config(_export(self._known().stack))
            except auto.CommandError:
                self._forget_known()
                return None

    def state_instance_ids(self) -> dict[int, str]:
        """slot -> instance id, as the stack's state records them."""
        return _ids_by_slot(_export(self._select()))

    def held_instance_ids(self) -> dict[str, str]:
        """Every instance the state holds, the slots' and the surges' (`slot-N` / `surge-N`
        -> instance id): what Retain keeps and deleting must account for."""
        state = _export(self._select())
        held = {f"slot-{s}": i for s, i in _ids_by_slot(state).items()}
        return held | {f"surge-{s}": i for s, i in _ids_by_surge(state).items()}

    # --- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _operation(
        self, kind: OperationKind, light: bool = False
    ) -> Iterator[tuple[auto.Stack, OperationResult, Mapping[str, Any]]]:
        """Lock, select, repair; yields the stack, its result and its state (one read).

        `light`: skip reading the state and the repair when this process already repaired the
        stack and its own runs since then all ended cleanly (the state is then empty of
        anything a killed run leaves); the state yielded is empty.
        """
        started = time.monotonic()
        with _stack_lock(self.name):
            cached = _known.get(self._key())
            light = light and cached is not None and cached.repaired
            # A kill can leave a half-written metadata file that makes the stack unselectable:
            # mend it before selecting (a cheap look at a file backend's files).
            mended = [] if light else recovery.mend_backend_files(self)
            known = self._known(reselect=bool(mended))
            known.stack.forget_export()  # the state may have moved since this process looked
            result = OperationResult(kind=kind, stack=self.name, seconds=0.0)
            timeout = self.settings.operation_timeout
            fired = threading.Event()

            def kill() -> None:
                fired.set()
                self.cancel()

            watchdog = threading.Timer(timeout, kill)
            watchdog.daemon = True
            watchdog.start()
            try:
                if light or known.stack.created:  # a stack created just now is empty
                    state: Mapping[str, Any] = {}
                    known.repaired = True
                else:
                    state = _export(known.stack)
                    self._dead_run_slots = recovery.pending_slots(state)
                    result.recovered = mended + recovery.repair(self, known.stack, state)
                    if result.recovered:  # the repair changed the state
                        state = _export(known.stack)
                    self._remember_urns(state)
                    known.repaired = True
                yield known.stack, result, state
            except auto.CommandError as err:
                self._forget_known()  # a failed run may have left a lock, pending ops, no stack
                if fired.is_set():
                    raise OperationTimeout(
                        f"{kind} of stack {self.name} ran over {timeout:.0f} s and was killed "
                        "with its plugins; the next operation recovers its lock"
                    ) from None
                raise EngineError(f"{kind} of stack {self.name} failed: {_reason(err)}") from None
            except BaseException:
                self._forget_known()
                raise
            finally:
                watchdog.cancel()
            result.recovered += recovery.prune_history(self)
            result.seconds = round(time.monotonic() - started, 2)

    def _key(self) -> tuple[str, str, str]:
        return (self.name, self.settings.backend_url, str(self._work_dir()))

    def _known(self, reselect: bool = False) -> _Known:
        """This process's memory of the stack, selecting it (one CLI run) the first time.
        The environment (credentials may rotate) is refreshed on every call."""
        key = self._key()
        known = _known.get(key)
        if known is None or reselect:
            known = _known[key] = _Known(stack=self._select())
        known.stack.workspace.env_vars = self._run_env()
        return known

    def _forget_known(self) -> None:
        _known.pop(self._key(), None)

    def _remember_urns(self, state: Mapping[str, Any]) -> None:
        known = self._known()
        known.urns = {
            slot: resource["urn"]
            for resource in state.get("resources") or []
            if resource.get("type") == SLOT_TYPE
            and (slot := slot_of_urn(resource.get("urn", ""))) is not None
        }
        known.surges = _ids_by_surge(state)

    def _forget_resources(self, stack: auto.Stack, urns: list[str]) -> None:
        """Drop these resources from the state, leaving their instances alone (as `pulumi state
        delete`): a slot's instance the cloud is taking, whose surge instance takes its name."""
        deployment = stack.export_stack()
        state = dict(deployment.deployment or {})
        gone = set(urns)
        state["resources"] = [r for r in state.get("resources") or [] if r.get("urn") not in gone]
        stack.import_stack(auto.Deployment(version=deployment.version, deployment=state))

    def _work_dir(self) -> Path:
        return self.settings.work_root / self.name

    def _select(
        self, work_dir: Path | None = None, backend: str | None = None, create: bool = True
    ) -> LeanStack:
        work_dir = work_dir or self._work_dir()
        work_dir.mkdir(parents=True, exist_ok=True)
        workspace = auto.LocalWorkspace(
            work_dir=str(work_dir),
            pulumi_command=pulumi_command(self.settings.tools_dir.parent),
            env_vars=self._run_env(),
            secrets_provider="passphrase",
            program=load_program(self.settings.project_dir),
            project_settings=auto.ProjectSettings(
                name=PROJECT,
                runtime="python",
                main=os.getcwd(),  # as the Automation API sets it for an inline program
                backend=auto.ProjectBackend(url=backend or self.settings.backend_url),
            ),
        )
        settings_file = config_file.settings_path(work_dir, self.name)
        if create and not settings_file.exists():
            # A stack a self-managed backend does not hold is made here, as `pulumi stack init`
            # makes it, with the process's salt: no CLI run before its first `up`.
            files = open_backend(backend or self.settings.backend_url, self._run_env())
            if files is not None and not checkpoint_exists(files, PROJECT, self.name):
                passphrase = self.settings.passphrase.get_secret_value()
                config_file.prepare_new_stack(settings_file, passphrase)
                check_fence()  # a write to the backend, as a CLI launch would be
                version = str(workspace.pulumi_version)
                salt = config_crypt.process_salt(passphrase)
                if write_new_stack(files, PROJECT, self.name, version, salt):
                    return LeanStack.made(self.name, workspace)
        return LeanStack.open(self.name, workspace, create)

    def _run_env(self) -> dict[str, str]:
        env = {
            "PULUMI_CONFIG_PASSPHRASE": self.settings.passphrase.get_secret_value(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
            # The plugins are installed in Pulumi's home; the copies beside the CLI on PATH
            # would only earn a warning on every run.
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
            # A bounded backend: compressed checkpoints and no .bak copy beside each one (the
            # history keeps the last few; recovery never needs the backup).
            "PULUMI_DIY_BACKEND_GZIP": "true",
            "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "true",
            "TENCENTCLOUD_REGION": self.region,
            **self.credentials.provider_env(),
        }
        if self.settings.cloud_endpoint:
            # The provider talks to <service>.tencentcloudapi.com over plain HTTP, through the
            # emulator acting as the HTTP proxy: the provider's code path is the real one.
            env["TENCENTCLOUD_PROTOCOL"] = "HTTP"
            env["HTTP_PROXY"] = self.settings.cloud_endpoint
            env["http_proxy"] = self.settings.cloud_endpoint
        if self.settings.rate_limit_runs:  # the provider's calls take the operator's tokens
            env.update(api_proxy.proxy_for(self.settings.cloud_endpoint).env())
        if home := os.environ.get("PULUMI_HOME"):
            env["PULUMI_HOME"] = home
        # A CLI run lives a second or two: collecting its garbage a fifth as often saves ~14 %
        # of the engine's CPU (bench/engine_ops.py) for ~10 % more peak memory.
        env["GOGC"] = os.environ.get("GOGC", "400")
        return env

    def _set_config(
        self,
        stack: auto.Stack,
        config: StackConfig,
        password: str | None,
        tag: bool = True,
        surge: list[int] | None = None,
        promote: list[int] | None = None,
        nonces: Mapping[str, str] | None = None,
    ) -> None:
        """Set the stack's config and tags, skipping the CLI runs when this process already set
        exactly these values. `surge`: slots with a surge instance; `promote`: slots whose
        surge instance takes the slot's name in this run (see the stack program)."""
        plain = {
            **config.to_pulumi_config(),
            f"{PROJECT}:installId": self.settings.install_id,
            f"{PROJECT}:surge": json.dumps(sorted(surge or [])),
            f"{PROJECT}:promote": json.dumps(sorted(promote or [])),
            # Each instance's generation (notice_nonces.py): not secret, the token is.
            f"{PROJECT}:noticeNonces": json.dumps(dict(sorted((nonces or {}).items()))),
        }
        values = {key: auto.ConfigValue(value) for key, value in plain.items()}
        if config.notice_agent is not None:
            key = self.settings.notice_key(self.pool.uid)
            values[f"{PROJECT}:noticeKey"] = auto.ConfigValue(key, secret=True)
            plain = {**plain, f"{PROJECT}:noticeKey": _fingerprint(key)}
        if password is not None:
            values[f"{PROJECT}:loginPassword"] = auto.ConfigValue(password, secret=True)
            plain = {**plain, f"{PROJECT}:loginPassword": _fingerprint(password)}
        if config.user_data and not config.user_data.startswith(USER_DATA_FINGERPRINT):
            values[f"{PROJECT}:userData"] = auto.ConfigValue(config.user_data, secret=True)
            plain = {**plain, f"{PROJECT}:userData": _fingerprint(config.user_data)}
        known = self._known() if tag else None
        if known is None or known.config != plain:
            secret = {key for key, value in values.items() if value.secret}
            previous = known.config if known else None  # what this process last set
            same_secrets = bool(previous) and all(
                previous is not None and previous.get(key) == plain[key] for key in secret
            )
            unsecret = {key: value for key, value in plain.items() if key not in secret}
            secrets = {} if same_secrets else {key: values[key].value for key in secret}
            passphrase = self.settings.passphrase.get_secret_value()
            if not config_file.write(stack, unsecret, secrets, passphrase):
                stack.set_all_config(values)
            if known is not None:
                known.config = plain
        if known is None or known.tagged:
            return
        wanted = {
            "spotpool:namespace": self.pool.namespace,
            "spotpool:name": self.pool.name,
            "spotpool:uid": self.pool.uid,
        }
        if not known.stack.ensure_tags(wanted):  # not a self-managed backend: the CLI
            current = {} if known.stack.created else stack.list_tags()
            for key, value in wanted.items():
                if current.get(key) != value:
                    stack.set_tag(key, value)
        known.tagged = True

    def _printer(self) -> EventPrinter | None:
        return EventPrinter(self.on_progress) if self.on_progress else None


def _next_type(config: StackConfig, slots: list[int]) -> StackConfig | None:
    return config.falling_back(slots)


def _replanned(
    stack: auto.Stack,
    config: StackConfig,
    err: auto.CommandError,
    slots: Iterable[int],
    replan: Replan | None,
    result: OperationResult,
) -> StackConfig:
    """After a failed run: when the cloud had no stock for some of `slots`, the config with
    those placed elsewhere; otherwise (or with nowhere left to go) the error again."""
    if not cloud_errors.is_no_stock(str(err)):
        raise err
    placed = slots_in(_export(stack))
    unplaced = [s for s in slots if s not in placed]
    moved = (replan or _next_type)(config, unplaced) if unplaced else None
    if moved is None:
        raise err
    where = ", ".join(
        f"slot {s} → {moved.zone_of(s)} {moved.type_of(s)}"
        + (" on-demand" if moved.charge_of(s) is not moved.charge_type else "")
        for s in unplaced
    )
    result.recovered.append(f"no spot stock: {where}")
    return moved


def _fingerprint(secret: str) -> str:
    """Stands for a secret in the remembered config: equal secrets, equal fingerprints."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _export(stack: auto.Stack) -> Mapping[str, Any]:
    """The state as the engine reads it (nothing secret): a LeanStack reads a self-managed
    backend's checkpoint file without a CLI run."""
    if isinstance(stack, LeanStack):
        return stack.read_state()
    return stack.export_stack().deployment or {}


def slots_in(state: Mapping[str, Any]) -> dict[int, SlotOutput]:
    """The pool's instances as a stack state records them (what refresh last saw)."""
    slots: dict[int, SlotOutput] = {}
    for resource in state.get("resources") or []:
        slot = slot_of_urn(resource.get("urn", ""))
        if resource.get("type") != SLOT_TYPE or not resource.get("id") or slot is None:
            continue
        out = resource.get("outputs") or {}
        slots[slot] = SlotOutput(
            slot=slot,
            instance_id=resource["id"],
            public_ip=out.get("publicIp") or None,
            private_ip=out.get("privateIp") or None,
            zone=out.get("availabilityZone"),
            instance_type=out.get("instanceType"),
            state=out.get("instanceStatus"),
            nonce=((out.get("tags") or {}).get(NONCE_TAG) or None),
        )
    return slots


def _last_nonces(config: Mapping[str, str] | None) -> dict[str, str]:
    """The instances' generations this process last set in the stack's config."""
    raw = (config or {}).get(f"{PROJECT}:noticeNonces") or "{}"
    return {str(k): str(v) for k, v in json.loads(raw).items()}


def _ids_by_slot(state: Mapping[str, Any]) -> dict[int, str]:
    return {slot: item.instance_id for slot, item in slots_in(state).items()}


def _slot_urns(state: Mapping[str, Any]) -> dict[int, str]:
    return {
        slot: resource["urn"]
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and (slot := slot_of_urn(resource.get("urn", ""))) is not None
    }


def _ids_by_surge(state: Mapping[str, Any]) -> dict[int, str]:
    """slot -> id of its surge instance, as the state records them."""
    return {
        slot: resource["id"]
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and resource.get("id")
        and (slot := surge_slot_of_urn(resource.get("urn", ""))) is not None
    }


def surge_plan(slots: set[int], surges: set[int], count: int) -> tuple[list[int], list[int]]:
    """Which surge instances an `up` keeps beside their slot's instance, and which it promotes
    into their slot (the slot's own instance left the state: the cloud took it). A surge of a
    slot the pool no longer has goes."""
    keep = sorted(s for s in surges if s in slots and s < count)
    promote = sorted(s for s in surges if s not in slots and s < count)
    return keep, promote


def _previous_config(state: Mapping[str, Any]) -> StackConfig | None:
    """The config of the stack's last up (the program exports it)."""
    roots = [r for r in state.get("resources") or [] if r.get("type") == "pulumi:pulumi:Stack"]
    output = (roots[0].get("outputs") or {}).get("config") if roots else None
    return StackConfig.model_validate(output) if isinstance(output, dict) else None


def _carried_over(
    config: StackConfig, state: Mapping[str, Any], owned: dict[int, str]
) -> StackConfig:
    """Carry the fallbacks and adoptions of the last config for the slots that kept their
    instance: dropping either would replace that instance."""
    previous = _previous_config(state)
    if previous is None:
        return config
    return config.keeping_fallbacks(previous, set(owned)).keeping_adopted(previous, owned)


def _pinned(config: StackConfig, previous: StackConfig | None, slots: list[int]) -> StackConfig:
    """`config` with `slots` placed exactly where `previous` had them (type, zone, charge): a
    surge instance is made, and promoted, with its slot's inputs, or the promotion would
    replace it."""
    if previous is None or not slots:
        return config

    def pin(mine: Mapping[int, T], theirs: Mapping[int, T]) -> dict[int, T]:
        kept = {slot: value for slot, value in mine.items() if slot not in slots}
        return {**kept, **{slot: theirs[slot] for slot in slots if slot in theirs}}

    return config.model_copy(
        update={
            "slot_types": pin(config.slot_types, previous.slot_types),
            "slot_zones": pin(config.slot_zones, previous.slot_zones),
            "slot_charges": pin(config.slot_charges, previous.slot_charges),
        }
    )


def instances_of(outputs: Mapping[str, Any], key: str = "instances") -> list[SlotOutput]:
    value = outputs.get(key)
    raw = value.value if value is not None else None
    return [SlotOutput.model_validate(item) for item in raw or []]


def _reason(err: auto.CommandError) -> str:
    """The engine's own error lines, without the command line or environment."""
    text = str(getattr(err, "stderr", "") or "") or str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-4:])[:1500]
