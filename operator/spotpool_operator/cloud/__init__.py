"""What the operator reads of the cloud beside the engine: the fleet probe, stock and
capacity-aware placement and the interruptions it learns, prices and cost, and the sweep of
stray instances.

May import: reporting (the layers of spotpool_operator: pyproject.toml, [tool.importlinter],
checked by `lint-imports`). Outside the operator: spotpool.engine, spotpool.api,
spotpool.version and kopf.
"""
