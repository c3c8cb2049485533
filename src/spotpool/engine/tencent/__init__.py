"""The Tencent Cloud API beside Pulumi: credentials and the identities (STS) they come from, direct
calls, requests signed (TC3), error codes classified, the token buckets at the published rate
limits, the rate-limiting proxy for the provider, prices and stock.

May import: nothing of the engine (the layers of spotpool.engine: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the engine: spotpool.api and
spotpool.toolchain; never the operator or kopf.
"""
