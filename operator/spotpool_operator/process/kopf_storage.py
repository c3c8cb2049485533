"""kopf's bookkeeping (handler progress, the last-handled spec) written only by the replica that
serves the pool.

kopf keeps both in the resource's annotations, shared by every replica that watches it. A
replica that does not hold the pool's shard runs no handler for it, and kopf would still record
the spec as handled (and its retries as its own): the serving replica would then miss the
change. So the annotations are written only while this replica serves the pool; reading them
is left as it is. The touch that wakes a delayed handler is left as well (it changes nothing).
"""

from collections.abc import Callable
from typing import Any

import kopf

Serves = Callable[[str], bool]  # pool uid -> this replica serves it now


def _uid(body: Any) -> str:
    return str(body.get("metadata", {}).get("uid", ""))


class ServedProgressStorage(kopf.AnnotationsProgressStorage):
    def __init__(self, serves: Serves, **options: Any) -> None:
        super().__init__(**options)
        self._serves = serves

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        if self._serves(_uid(body)):
            super().store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        if self._serves(_uid(body)):
            super().purge(key=key, body=body, patch=patch)


class ServedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, serves: Serves, **options: Any) -> None:
        super().__init__(**options)
        self._serves = serves

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        if self._serves(_uid(body)):
            super().store(body=body, patch=patch, essence=essence)
