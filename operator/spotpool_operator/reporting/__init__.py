"""What the operator tells Kubernetes and Prometheus: the status rendered and written under the
shard's fencing token, conditions (drift among them), Events, metrics (the offerings' too), and
the API calls kopf does not make (Secrets, status).

May import: nothing of the operator (the layers of spotpool_operator: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the operator: spotpool.engine,
spotpool.api, spotpool.version and kopf.
"""
