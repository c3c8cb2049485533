"""Who may write a pool's stack, checked where the write lands: the pure lock-ownership decision,
the fences of a run (its cloud calls through the API proxy, its state writes through the S3
fence) and the Pulumi processes stopped for real when a fence fails.

May import: tencent (the layers of spotpool.engine: pyproject.toml, [tool.importlinter], checked
by `lint-imports`). Outside the engine: spotpool.api and spotpool.toolchain; never the operator
or kopf.
"""
