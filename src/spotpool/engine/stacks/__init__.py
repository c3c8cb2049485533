"""A pool's Pulumi stack as the operator drives it: `PoolStack` (stack.py) with its up, refresh,
preview and destroy, the preview of a change, rollouts in batches and where their slots go
(disruption, replan), and the read-only inventory of a backend's stacks.

May import: every other part of the engine (the layers of spotpool.engine: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the engine: spotpool.api and
spotpool.toolchain; never the operator or kopf.
"""
