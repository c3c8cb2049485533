"""A pool's instances as this cluster's nodes (spec.nodes, docs/nodes.md): each instance's Node
found and labelled (finding.py, labelling.py), drained through the Eviction API before its
instance goes (draining.py), deleted at once when the cloud took it without notice, and what
the pool jobs call, with its Events and metrics (keeper.py).

May import: reporting (the layers of spotpool_operator: pyproject.toml, [tool.importlinter],
checked by `lint-imports`). Outside the operator: spotpool.engine, spotpool.api,
spotpool.version and kopf.
"""
