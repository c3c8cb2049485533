"""Reclaims and what runs ahead of them: the fleet probe's gone slots replaced in one targeted run,
termination notices from the instances' agents (their endpoint and the surge they start), and
on-demand fallbacks going back to spot.

May import: convergence, basics, replicas, cloud, reporting (the layers of spotpool_operator:
pyproject.toml, [tool.importlinter], checked by `lint-imports`). Outside the operator:
spotpool.engine, spotpool.api, spotpool.version and kopf.
"""
