"""Pulumi program of a Spotpool stack: everything comes from stack config, nothing is built in."""

import pulumi
from spot_pool import SpotPool

from spotpool.api.stackconfig import PROJECT, StackConfig

settings = pulumi.Config(PROJECT)
config = StackConfig.model_validate(settings.require_object("pool"))
pool = SpotPool(config.pool.name, config, login_password=settings.get_secret("loginPassword"))

pulumi.export("pool", f"{config.pool.namespace}/{config.pool.name}")
pulumi.export("desired", config.count)
pulumi.export("instances", pool.outputs)
