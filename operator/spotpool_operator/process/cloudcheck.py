"""The quick reclaim check: which of a pool's instances the cloud still runs, in one API call."""

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.leftovers.recovery import GONE_STATES
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.process.reconciler import CloudLookup


def cloud_lookup(endpoint: str | None) -> CloudLookup:
    """A CloudLookup against Tencent Cloud, or against the emulator at `endpoint`."""

    def alive(pool: PoolIdentity, credentials: Credentials, region: str) -> set[str]:
        client = cloud.cvm(credentials, region, endpoint)
        return {
            item.instance_id
            for item in cloud.pool_instances(client, pool.uid)
            if item.state not in GONE_STATES
        }

    return alive
