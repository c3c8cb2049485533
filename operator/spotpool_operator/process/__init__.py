"""One operator process: its command line (`spotpool operator run`), the assembly of cluster
access, engine, metrics and handlers, the kopf handlers and kopf's own bookkeeping, the
reconciler that joins the pool jobs, the log mask, and `spotpool offerings`.

May import: every other part of the operator (the layers of spotpool_operator: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the operator: spotpool.engine,
spotpool.api, spotpool.version and kopf.
"""
