"""`make test`'s hand-out of test files to the xdist workers: `--dist loadfile` (a file to a
worker, so module fixtures stay whole), in the collection's order (tests/conftest.py puts the
longest first; xdist would otherwise sort the files by their number of tests, which put every
one-test e2e module, the longest of all, at the very end), with the heavy modules in a lane of
their own: one heavy module at a time, the next handed out the moment the last one ends, to the
worker with the least work queued; no worker takes one while another runs one.

The heavy test lock (tests/conftest.py) stays as the guard for runs without this scheduler; with
it no worker ever waits at the lock (an idle worker is a core lost on this machine)."""

from typing import Any

from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]


class HeavyLaneScheduling(LoadFileScheduling):  # type: ignore[misc]
    def __init__(self, config: Any, log: Any = None, heavy: frozenset[str] = frozenset()) -> None:
        super().__init__(config, log)
        self.heavy = heavy
        config.option.loadscopereorder = False  # the collection's order, longest first

    def _heavy_running(self) -> bool:
        return any(
            scope in self.heavy and not all(tests.values())
            for work in self.assigned_work.values()
            for scope, tests in work.items()
        )

    def _pick(self) -> str | None:
        """The next file to hand out: the first heavy one when the lane is free, else the first
        light one; None when only heavy ones are left and one runs (the worker waits)."""
        queued: list[str] = list(self.workqueue)
        if not self._heavy_running():
            heavy = next((scope for scope in queued if scope in self.heavy), None)
            if heavy is not None:
                return heavy
        return next((scope for scope in queued if scope not in self.heavy), None)

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._pick()
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        nodeid = self.registered_collections[node][item_index]
        self.assigned_work[node][self._split_scope(nodeid)][nodeid] = True
        # Every worker low on work may take the next file (a heavy one ending frees the lane for
        # a worker that waits with nothing to do); the one with the least queued asks first.
        for each in sorted(self.nodes, key=lambda n: self._pending_of(self.assigned_work[n])):
            self._reschedule(each)
