"""Engine slots: bounded per replica and per account, the most urgent waiter first."""

import asyncio

import pytest
from spotpool_operator.convergence.slots import EngineSlots, Priority

pytestmark = pytest.mark.unit


async def _run(slots: EngineSlots, order: list[str], name: str, priority: Priority,
               account: str = "", hold: asyncio.Event | None = None) -> None:  # fmt: skip
    async with slots.take(priority, account):
        order.append(name)
        if hold is not None:
            await hold.wait()
        await asyncio.sleep(0)


def test_replacements_go_first_then_updates_refreshes_and_creations() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        slots, gate = EngineSlots(1), asyncio.Event()
        first = asyncio.create_task(_run(slots, order, "busy", Priority.CREATE, hold=gate))
        await asyncio.sleep(0)
        tasks = [
            asyncio.create_task(_run(slots, order, name, priority))
            for name, priority in [
                ("create-1", Priority.CREATE), ("refresh-1", Priority.REFRESH),
                ("create-2", Priority.CREATE), ("replace-1", Priority.REPLACE),
                ("update-1", Priority.UPDATE), ("replace-2", Priority.REPLACE),
            ]
        ]  # fmt: skip
        await asyncio.sleep(0)
        assert slots.queued() == 6 and slots.queued(Priority.REPLACE) == 2
        gate.set()
        await asyncio.gather(first, *tasks)
        assert slots.running == 0 and slots.queued() == 0
        return order

    assert asyncio.run(scenario()) == [
        "busy",
        "replace-1",
        "replace-2",
        "update-1",
        "refresh-1",
        "create-1",
        "create-2",
    ]


def test_one_account_never_takes_more_than_its_share() -> None:
    async def scenario() -> tuple[int, int, list[str]]:
        order: list[str] = []
        slots, gate = EngineSlots(3, per_account=1), asyncio.Event()
        tasks = [
            asyncio.create_task(
                _run(slots, order, f"{account}{i}", Priority.REPLACE, account, gate)
            )
            for i in range(3)
            for account in ("a", "b")
        ]
        await asyncio.sleep(0.01)
        running, waiting = slots.running, slots.queued()
        gate.set()
        await asyncio.gather(*tasks)
        return running, waiting, order

    running, waiting, order = asyncio.run(scenario())
    assert (running, waiting) == (2, 4)  # one of a's, one of b's: the third slot stays free
    assert sorted(order[:2]) == ["a0", "b0"]


def test_a_cancelled_waiter_gives_its_place_up() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        slots, gate = EngineSlots(1), asyncio.Event()
        busy = asyncio.create_task(_run(slots, order, "busy", Priority.REPLACE, hold=gate))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_run(slots, order, "gone", Priority.REPLACE))
        later = asyncio.create_task(_run(slots, order, "later", Priority.CREATE))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        await asyncio.gather(busy, later)
        assert slots.running == 0
        return order

    assert asyncio.run(scenario()) == ["busy", "later"]


def test_resize_lets_more_through() -> None:
    async def scenario() -> int:
        order: list[str] = []
        slots, gate = EngineSlots(4, per_account=1), asyncio.Event()
        tasks = [asyncio.create_task(_run(slots, order, str(i), Priority.UPDATE, "a", gate))
                 for i in range(3)]  # fmt: skip
        await asyncio.sleep(0)
        slots.resize(per_account=3)
        await asyncio.sleep(0)
        running = slots.running
        gate.set()
        await asyncio.gather(*tasks)
        return running

    assert asyncio.run(scenario()) == 3


def test_slots_go_round_the_namespaces_within_a_priority() -> None:
    """Issue 46: team-a applying four pools at once made team-b's one pool wait behind all four
    (first come first served); now each free slot goes to the namespace served longest ago, and
    a more urgent priority still goes first."""

    async def run_in(slots: EngineSlots, order: list[str], name: str, namespace: str,
                     priority: Priority = Priority.CREATE) -> None:  # fmt: skip
        async with slots.take(priority, "", namespace):
            order.append(name)
            await asyncio.sleep(0)

    async def scenario() -> list[str]:
        order: list[str] = []
        slots, gate = EngineSlots(1), asyncio.Event()
        busy = asyncio.create_task(_run(slots, order, "busy", Priority.CREATE, hold=gate))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(run_in(slots, order, f"a{i}", "team-a")) for i in range(4)]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(run_in(slots, order, f"b{i}", "team-b")) for i in range(2)]
        tasks.append(asyncio.create_task(run_in(slots, order, "c-replace", "team-c",
                                                Priority.REPLACE)))  # fmt: skip
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(busy, *tasks)
        return order

    assert asyncio.run(scenario()) == ["busy", "c-replace", "a0", "b0", "a1", "b1", "a2", "a3"]


def test_a_namespace_with_fewer_operations_running_goes_first() -> None:
    """team-b was served more recently, but team-a has one running: team-b's waiter goes first."""

    async def hold(slots: EngineSlots, order: list[str], name: str, namespace: str,
                   gate: asyncio.Event) -> None:  # fmt: skip
        async with slots.take(Priority.UPDATE, "", namespace):
            order.append(name)
            await gate.wait()

    async def scenario() -> list[str]:
        order: list[str] = []
        slots = EngineSlots(2)
        a_gate, b_gate, end = asyncio.Event(), asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(hold(slots, order, "a-long", "team-a", a_gate))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(hold(slots, order, "b-short", "team-b", b_gate)))
        await asyncio.sleep(0)  # both run; team-b was granted last
        tasks.append(asyncio.create_task(hold(slots, order, "a-next", "team-a", end)))
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(hold(slots, order, "b-next", "team-b", end)))
        await asyncio.sleep(0)
        b_gate.set()  # a slot frees: team-a runs one, team-b none
        await asyncio.sleep(0.01)
        first = list(order)
        a_gate.set()
        end.set()
        await asyncio.gather(*tasks)
        return first

    assert asyncio.run(scenario()) == ["a-long", "b-short", "b-next"]
