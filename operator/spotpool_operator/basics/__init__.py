"""What every pool job speaks: the snapshot of a Spotpool and its live state, why an operation
failed, the pool's credentials and what the operator process is told (settings).

May import: replicas, cloud, reporting (the layers of spotpool_operator: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the operator: spotpool.engine,
spotpool.api, spotpool.version and kopf.
"""
