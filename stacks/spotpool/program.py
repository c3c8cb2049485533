"""Pulumi program of a Spotpool stack: everything comes from stack config, nothing is built in.

`main` is what the engine runs inline through the Automation API; `__main__.py` runs it when
the Pulumi CLI runs the project itself.
"""

import pulumi
from spot_pool import SpotPool

from spotpool.api.stackconfig import PROJECT, StackConfig


def main() -> SpotPool:
    settings = pulumi.Config(PROJECT)
    config = StackConfig.model_validate(settings.require_object("pool"))
    pool = SpotPool(
        config.pool.name,
        config,
        login_password=settings.get_secret("loginPassword"),
        install=settings.get("installId"),
        cluster=settings.get("clusterId") or None,
        user_data=settings.get_secret("userData"),
        notice_key=settings.get_secret("noticeKey"),
        notice_nonces=settings.get_object("noticeNonces") or {},
        surge=settings.get_object("surge") or [],
        promote=settings.get_object("promote") or [],
        keep_secret_inputs=settings.get_object("keepSecretInputs") or [],
    )
    pulumi.export("pool", f"{config.pool.namespace}/{config.pool.name}")
    pulumi.export("desired", config.count)
    pulumi.export("instances", pool.outputs)
    pulumi.export("surges", pool.surge_outputs)
    # The rendered spec, so a stack can be previewed again (and inspected) from its state alone;
    # its user data only as a fingerprint (the text is the secret config value userData).
    pulumi.export("config", config.redacted().model_dump(mode="json", by_alias=True))
    return pool
