"""A pool converged through the engine: the engine runner and its calls (one at a time per pool, in
engine slots), the pool book, create/update/resume, deletion, and the storm fast path's hook
into the runner.

May import: basics, replicas, cloud, reporting (the layers of spotpool_operator: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the operator: spotpool.engine,
spotpool.api, spotpool.version and kopf.
"""
