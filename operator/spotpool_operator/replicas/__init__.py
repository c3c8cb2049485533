"""Which replica serves which pool: shards hashed onto Leases, the Lease and its fencing token, a
replica's work on its shards, their metrics, and `spotpool shards`.

May import: reporting (the layers of spotpool_operator: pyproject.toml, [tool.importlinter],
checked by `lint-imports`). Outside the operator: spotpool.engine, spotpool.api,
spotpool.version and kopf.
"""
