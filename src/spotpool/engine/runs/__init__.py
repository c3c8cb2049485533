"""One Pulumi run on a pool's stack: the frame every operation runs in (its lock, its repair, its
result), the workspace and pinned CLI, the stack program loaded inline, and the stack config
written before the run.

May import: leftovers, state, basics, fencing, tencent (the layers of spotpool.engine:
pyproject.toml, [tool.importlinter], checked by `lint-imports`). Outside the engine:
spotpool.api and spotpool.toolchain; never the operator or kopf.
"""
