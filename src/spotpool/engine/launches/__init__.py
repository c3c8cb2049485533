"""Instances started beside or ahead of a Pulumi run: the storm fast path's launches through the
cloud API (fast_launch) and their intents kept in the backend, surge instances started on a
termination notice, and each instance's generation nonce.

May import: runs, leftovers, state, basics, fencing, tencent (the layers of spotpool.engine:
pyproject.toml, [tool.importlinter], checked by `lint-imports`). Outside the engine:
spotpool.api and spotpool.toolchain; never the operator or kopf.
"""
