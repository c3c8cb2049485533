"""What every part of the engine speaks: its settings, the view of a pool's stack the parts share,
its errors, progress events and typed results.

May import: fencing, tencent (the layers of spotpool.engine: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the engine: spotpool.api and
spotpool.toolchain; never the operator or kopf.
"""
