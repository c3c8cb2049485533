"""A withdrawn grant in the credential cache (engine/tencent/identities.py), with a clock of its
own and no STS: a renewal asks the grant first and never re-assumes past a refusal; `recheck`
revokes at once; a revoked identity's keys are gone for every holder (and for the API proxy's
re-signing); a policy that cannot be read refuses nothing; a fresh grant makes it usable again."""

import pytest
from pydantic import SecretStr

from spotpool.api.access import Refusal
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CredentialCache, Revoked

pytestmark = pytest.mark.unit
IDENTITY = "role:qcs::cam::uin/100000000002:roleName/team-b/spotpool_team-b_gpu"
REFUSED = Refusal("RoleNotAllowed", "no SpotpoolAccessPolicy selecting namespace team-b grants it")


class World:
    def __init__(self) -> None:
        self.now = 1000.0
        self.cache = CredentialCache(clock=lambda: self.now)
        self.fetched = 0
        self.refusal: Refusal | None = None
        self.unreadable = False

    def fetch(self) -> Credentials:
        self.fetched += 1
        return Credentials(
            secret_id=SecretStr(f"AKIDtmp{self.fetched}"),
            secret_key=SecretStr(f"key{self.fetched}"),
            token=SecretStr("token"),
            expires=self.now + 60,
            identity=IDENTITY,
        )

    def check(self) -> Refusal | None:
        if self.unreadable:
            raise ConnectionError("the API server did not answer")
        return self.refusal


def test_a_renewal_asks_the_grant_first_and_never_goes_past_a_refusal() -> None:
    world = World()
    held = world.cache.get(IDENTITY, world.fetch, world.check)
    assert held.current().secret_id.get_secret_value() == "AKIDtmp1"
    world.now += 45  # past two thirds of the keys' life: the next use renews
    world.refusal = REFUSED
    with pytest.raises(Revoked) as revoked:
        held.current()
    assert (revoked.value.code, revoked.value.message) == (REFUSED.reason, REFUSED.message)
    assert world.fetched == 1  # not re-assumed
    assert world.cache.current_for("AKIDtmp1") is None  # the API proxy re-signs nothing with it
    assert world.cache.revoked() == {IDENTITY: REFUSED}
    with pytest.raises(Revoked):  # for every holder, from now on
        held.current()


def test_recheck_revokes_at_once_and_a_fresh_grant_restores() -> None:
    world = World()
    held = world.cache.get(IDENTITY, world.fetch, world.check)
    assert world.cache.recheck() == {}
    world.unreadable = True  # the policies cannot be read: the grant stands
    assert world.cache.recheck() == {} and held.current().secret_id
    world.unreadable, world.refusal = False, REFUSED
    assert world.cache.recheck() == {IDENTITY: REFUSED}  # the keys had life left: gone all the same
    with pytest.raises(Revoked):
        held.current()
    assert world.cache.recheck() == {}  # said once
    world.refusal = None  # granted again: the pool's next resolve gets keys anew
    again = world.cache.get(IDENTITY, world.fetch, world.check)
    assert again.current().secret_id.get_secret_value() == "AKIDtmp2"
    assert world.cache.revoked() == {}
