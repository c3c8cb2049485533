"""The operator's world for the e2e tests: spotpool.localworld.operator, re-exported."""

from spotpool.localworld.operator import (
    ARTICLE_SAMPLE,
    GONE_STATES,
    PASSPHRASE,
    ROOT,
    OperatorWorld,
    article_manifest,
    pool_manifest,
    secret_manifest,
)

__all__ = [
    "ARTICLE_SAMPLE",
    "GONE_STATES",
    "PASSPHRASE",
    "ROOT",
    "OperatorWorld",
    "article_manifest",
    "pool_manifest",
    "secret_manifest",
]
