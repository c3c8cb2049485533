"""Read-your-writes: what this process launched and terminated, remembered until the cloud's
listing shows it.

`DescribeInstances` is eventually consistent: an instance launched a moment ago can be missing
from an answer, and one terminated a moment ago can still be listed as it was (RUNNING). Taken
at its word, such an answer makes a just-launched instance "reclaimed" (the fleet probe
launches another, and another: waves) and crashes the provider's create (it dereferences the
missing instance). So every launch this process saw the cloud answer (the provider's through
the API proxy, the fast path's through the SDK) is remembered until a listing shows it, at most
`bound` seconds; every termination it sent, for `bound` seconds. Readers ask:

- `unlisted(ids)`: which of these are launches the listing has not caught up with (wait for
  them, never take them as gone);
- `terminated_recently(id)`: a listing that still shows it running is stale.

Like Karpenter's cache of just-launched instances: memory of this process only. A restarted
process has none, and the orphan rules' records (dead_runs.py) cover what it launched before.
"""

import threading
import time
from collections.abc import Iterable

DEFAULT_BOUND = 60.0  # seconds a listing may lag behind a launch or a termination, at most


class RecentWrites:
    def __init__(self, bound: float = DEFAULT_BOUND) -> None:
        self.bound = bound
        self._launched: dict[str, float] = {}  # id -> monotonic time the cloud answered
        self._terminated: dict[str, float] = {}  # id -> monotonic time the call was sent
        self._guard = threading.Lock()

    def launched(self, ids: Iterable[str]) -> None:
        """The cloud answered a launch with these ids."""
        now = time.monotonic()
        with self._guard:
            self._prune(now)
            for instance_id in ids:
                self._launched.setdefault(instance_id, now)

    def terminated(self, ids: Iterable[str]) -> None:
        """A TerminateInstances of these ids was sent (answered or not)."""
        now = time.monotonic()
        with self._guard:
            self._prune(now)
            for instance_id in ids:
                self._terminated[instance_id] = now
                self._launched.pop(instance_id, None)

    def listed(self, ids: Iterable[str]) -> None:
        """A listing showed these ids: their launches need no waiting for any more."""
        with self._guard:
            for instance_id in ids:
                self._launched.pop(instance_id, None)

    def unlisted(self, ids: Iterable[str]) -> set[str]:
        """Those of `ids` launched by this process within `bound` seconds and never listed
        since: missing from an answer means "not yet", not "gone"."""
        now = time.monotonic()
        with self._guard:
            self._prune(now)
            return {i for i in ids if i in self._launched}

    def terminated_recently(self, instance_id: str) -> bool:
        now = time.monotonic()
        with self._guard:
            sent = self._terminated.get(instance_id)
            return sent is not None and now - sent < self.bound

    def _prune(self, now: float) -> None:
        for book in (self._launched, self._terminated):
            for instance_id in [i for i, t in book.items() if now - t >= self.bound]:
                del book[instance_id]


RECENT = RecentWrites()  # the process's one memory: the proxy's runs and the SDK calls share it
