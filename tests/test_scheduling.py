"""`make test`'s hand-out of files to workers (tests/_support/scheduling.py), on xdist's own
scheduler with workers simulated: the files go out in the collection's order (not sorted by
their number of tests), one heavy file at a time, and a worker with nothing to do takes the
next heavy file the moment the last one ends."""

from types import SimpleNamespace
from typing import Any

import pytest

from tests._support.scheduling import HeavyLaneScheduling

pytestmark = pytest.mark.unit


class Worker:
    """A worker as the scheduler sees it: the tests it was sent, run one at a time in order."""

    def __init__(self, name: str) -> None:
        self.name, self.shutting_down, self.queue = name, False, list[int]()
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.queue += indexes

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(collection: list[str], heavy: set[str], workers: int) -> tuple[Any, list[Worker]]:
    option = SimpleNamespace(loadscopereorder=True)
    config = SimpleNamespace(option=option, getvalue=lambda name: [f"{workers}*popen"])
    scheduler = HeavyLaneScheduling(config, heavy=frozenset(heavy))
    nodes = [Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return scheduler, nodes


def _file(scheduler: Any, index: int) -> str:
    return str(scheduler.collection[index]).split("::")[0]


def test_files_go_out_in_the_collections_order_not_by_their_test_count() -> None:
    collection = ["long.py::t"] + [f"many.py::t{n}" for n in range(9)] + ["short.py::t"]
    scheduler, (worker,) = _scheduler(collection, set(), 1)
    assert [_file(scheduler, i) for i in worker.queue][:1] == ["long.py"]


def test_one_heavy_file_at_a_time_and_the_next_to_a_worker_with_nothing_to_do() -> None:
    collection = ["h1.py::t", "h2.py::t", "h3.py::t"] + [
        f"l{n}.py::t{k}" for n in range(4) for k in range(3)
    ]
    scheduler, workers = _scheduler(collection, {"h1.py", "h2.py", "h3.py"}, 3)
    log: list[tuple[str, str]] = []  # (worker, file) in the order they ran
    for _ in range(200):  # step: each worker with something queued finishes its next test
        if not any(w.queue for w in workers):
            break
        sent = {w.name: [_file(scheduler, i) for i in w.queue] for w in workers}
        heavy_sent = [f for files in sent.values() for f in files if f.startswith("h")]
        assert len(heavy_sent) <= 1, sent  # never two heavy files out at once
        for worker in workers:
            if worker.queue:
                index = worker.queue.pop(0)
                log.append((worker.name, _file(scheduler, index)))
                scheduler.mark_test_complete(worker, index)
    ran = [f for _, f in log]
    assert sorted(set(ran)) == sorted({c.split("::")[0] for c in collection})  # all of them ran
    assert len(ran) == len(collection)
    heavy_order = [f for f in ran if f.startswith("h")]
    assert heavy_order == ["h1.py", "h2.py", "h3.py"]  # the lane in the collection's order
    assert scheduler.tests_finished
