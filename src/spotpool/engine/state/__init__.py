"""What the state backend holds and how the engine reads it without the CLI: the backend's files
(`file://`, `s3://`), the lean Automation API stack, what a stack's state says (slots, URNs, the
last config, drift after a refresh), a late `file://` checkpoint undone, and the secrets of the
config (passphrase crypt, keyserver).

May import: basics, fencing, tencent (the layers of spotpool.engine: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the engine: spotpool.api and
spotpool.toolchain; never the operator or kopf.
"""
