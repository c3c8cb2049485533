"""`bench/storm.py --accounts N`: the operator's pools spread over N accounts, each pool assuming
a role of its account (AssumeRole with the emulator's own keys, trusted by every role), and, for
`--seeded` fleets, the seeded instances launched in each pool's account."""

import zlib
from typing import Any

from pydantic import SecretStr

from bench.fleet_probe import TEMPLATE, Seeder
from spotpool.api.identity import AssumeRole
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CREDENTIALS
from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY, EmulatorProcess
from spotpool.localworld.operator import OperatorWorld

OWN_ACCOUNT = "100000000001"  # the emulator's own keys' account


class StormAccounts:
    def __init__(self, count: int) -> None:
        self.count = count
        self.accounts = [f"2000000000{n:02d}" for n in range(count)]

    def role_arn(self, account: str) -> str:
        return f"qcs::cam::uin/{account}:roleName/storm"

    def of(self, name: str) -> str:
        """A pool's account: a stable spread, a quarter each for four."""
        if name == TEMPLATE:
            return self.accounts[0]
        return self.accounts[zlib.crc32(name.encode()) % self.count]

    def configure(self, emulator: EmulatorProcess) -> None:
        if self.count <= 1:
            return
        roles = [
            {"Account": a, "RoleName": "storm", "TrustedAccounts": [OWN_ACCOUNT]}
            for a in self.accounts
        ]
        emulator.admin_ok("POST", "/_emulator/iam", {"Roles": roles})

    def pool(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The manifest, with its account's role when the pools are spread."""
        if self.count > 1:
            account = self.of(manifest["metadata"]["name"])
            manifest["spec"]["assumeRole"] = {"roleArn": self.role_arn(account)}
        return manifest


class AccountSeeder(Seeder):
    """Seeds pools as fleet_probe's Seeder does, each pool's instances in its own account."""

    def __init__(
        self, world: OperatorWorld, namespace: str, pools: int, size: int, accounts: StormAccounts
    ) -> None:
        super().__init__(world, namespace, pools, size)
        self.accounts = accounts
        keys = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
        endpoint = world.emulator.endpoint
        self.clients = {
            account: cloud.cvm(
                CREDENTIALS.role(keys, AssumeRole(role_arn=accounts.role_arn(account)), endpoint),
                "ap-singapore",
                endpoint,
            )
            for account in accounts.accounts
        }

    def manifest(self, name: str) -> dict[str, Any]:
        return self.accounts.pool(super().manifest(name))

    def _run(self, cvm: Any, template: dict[str, Any], name: str, uid: str) -> str:
        return super()._run(self.clients[self.accounts.of(name)], template, name, uid)
