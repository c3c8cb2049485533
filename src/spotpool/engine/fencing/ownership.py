"""Who may break a Pulumi stack lock: one pure decision over the lock's owner and this writer.

A self-managed backend records each lock's owner (hostname and pid of the `pulumi` CLI that
took it, and when). A lock is broken only when its owner is provably gone:

- the operator holds its Kubernetes Lease, and the lock was taken by another host that held the
  Lease earlier (a replaced pod): that holder lost or released the Lease, and a holder's runs
  are dead before anyone else may take its Lease over (operator lease.py and shards.py: no
  clock of two nodes is compared, and no CLI is launched once the Lease slipped away); or by
  this host before this process acquired the Lease (this pod before a container restart,
  which may even reuse the dead pid: one clock, so the lock's time tells). With replicas,
  the Lease is the one of the pool's shard (operator shards.py): a replica that held the shard
  earlier stopped writing its stacks when it lost or gave the shard up, even if it lives on
  serving other shards; a replica that never held this shard proves nothing by this Lease
  alone. But a host that held *any* Lease of this install (the single Lease of a release
  before shards, another shard's Lease under another shard count, a membership Lease) and now
  holds none of them, nor a live membership, has stopped writing every stack: the same rule
  stopped its runs before each of its Leases could be taken over or seen expired, and it may
  write nothing without one (`InstallLeases`, read after the lock was);
- or the lock is this host's and its pid is not alive (a CLI that was killed here);
- or, the way out of every other stale lock of the install (its host fell off the Lease's
  list of 32 holders, a shard count changed): the operator holds its Lease, the lock was taken
  before this holder's token began (before it acquired the Lease, by more than any clock skew)
  and it is older than any run can be (the operation timeout kills every run of the operator,
  plus `STALE_MARGIN`). A person's own `pulumi up` that old is broken by this rule too.

A lock of anyone else (a person's `pulumi up` on a laptop, another install) is never broken:
the operation reports it instead (`StackLockedError`, condition StackLocked).
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable


class LeaseView(Protocol):
    def held(self) -> bool:
        """This process holds its Lease right now."""
        ...

    def acquired_at(self) -> datetime:
        """When this process acquired the Lease (aware, UTC)."""
        ...

    def earlier_holders(self) -> frozenset[str]:
        """Hostnames of the Lease's holders before this process (recorded in the Lease)."""
        ...


# Beyond the operation timeout: the kill of a timed-out run, a Lease's expiry and any clock
# skew between two nodes (the lock's time is its host's clock, the age is read on ours).
STALE_MARGIN = timedelta(minutes=10)


@dataclass(frozen=True)
class InstallHosts:
    earlier: frozenset[str]  # hostnames recorded as holders of any Lease of this install
    current: frozenset[str]  # hostnames holding one of them now, live membership included


@runtime_checkable
class InstallLeases(Protocol):
    def install_hosts(self) -> InstallHosts:
        """Every Lease of this install as read now (after the lock was read: whoever took
        the lock while holding a Lease is seen holding it, or its Lease expired since)."""
        ...


@dataclass(frozen=True)
class Writer:
    hostname: str
    pid: int
    lease: LeaseView | None = None  # None: run by hand, no Lease: only the same-host rule


@dataclass(frozen=True)
class LockOwner:
    key: str  # the lock file's path in the backend
    hostname: str
    pid: int | None
    username: str
    timestamp: datetime | None

    @classmethod
    def parse(cls, key: str, content: dict[str, Any]) -> "LockOwner":
        pid = content.get("pid")
        return cls(
            key=key,
            hostname=str(content.get("hostname") or ""),
            pid=pid if isinstance(pid, int) else None,
            username=str(content.get("username") or ""),
            timestamp=_parse_time(content.get("timestamp")),
        )

    def describe(self, now: datetime) -> str:
        age = f", {int((now - self.timestamp).total_seconds())} s ago" if self.timestamp else ""
        return f"{self.username or '?'}@{self.hostname or '?'} (pid {self.pid}){age}"


@dataclass(frozen=True)
class LockDecision:
    break_it: bool
    reason: str


def decide_lock(
    lock: LockOwner,
    writer: Writer,
    pid_alive: Callable[[int], bool],
    now: datetime | None = None,
    run_limit: timedelta | None = None,
) -> LockDecision:
    """Break the lock or not, and why. `run_limit`: the longest a run of the operator lasts
    (its operation timeout); with `now`, a lock older than that and than this Lease holder's
    token is broken whoever took it."""
    lease = writer.lease
    same_host = bool(lock.hostname) and lock.hostname == writer.hostname
    if lease is not None:
        if not lease.held():
            return LockDecision(False, "this operator does not hold its Lease: it breaks nothing")
        earlier = bool(lock.hostname) and lock.hostname in lease.earlier_holders()
        if earlier and not same_host:
            # No clock of another node is read: an earlier holder on another host stopped its
            # runs before its Lease could be taken over, so its lock is a dead run's.
            return LockDecision(
                True,
                f"taken by {lock.hostname}, an earlier holder of the Lease: it stopped its "
                "runs before this operator could acquire the Lease",
            )
        if not same_host and lock.hostname and isinstance(lease, InstallLeases):
            hosts = lease.install_hosts()
            if lock.hostname in hosts.earlier and lock.hostname not in hosts.current:
                return LockDecision(
                    True,
                    f"taken by {lock.hostname}, an earlier holder of this install's Leases "
                    "that holds none of them now and has no live membership: it stopped its "
                    "runs when it lost or gave them up",
                )
        acquired = lease.acquired_at()
        if earlier and lock.timestamp is not None and lock.timestamp < acquired:
            # This host before a restart (the same clock): a lock older than this process's
            # Lease is the previous container's, even if its pid is reused.
            return LockDecision(
                True,
                f"taken on this host before this operator acquired the Lease "
                f"({acquired.isoformat(timespec='seconds')}): a previous container's",
            )
        if _older_than_any_run(lock, acquired, now, run_limit):
            assert run_limit is not None
            return LockDecision(
                True,
                f"taken before this operator acquired the Lease "
                f"({acquired.isoformat(timespec='seconds')}) and older than any run can be "
                f"(runs are killed after {int(run_limit.total_seconds())} s): its run is over",
            )
    if same_host and lock.pid is not None and lock.pid != writer.pid and not pid_alive(lock.pid):
        return LockDecision(True, f"its process {lock.pid} on this host is not running")
    return LockDecision(False, "its owner may still be running")


def _older_than_any_run(
    lock: LockOwner, acquired: datetime, now: datetime | None, run_limit: timedelta | None
) -> bool:
    if lock.timestamp is None or now is None or run_limit is None:
        return False
    before_token = lock.timestamp < acquired - STALE_MARGIN
    return before_token and now - lock.timestamp > run_limit + STALE_MARGIN


def _parse_time(value: object) -> datetime | None:
    """Go's RFC 3339 with nanoseconds (`2026-11-24T04:20:00.123456789Z`) as an aware time."""
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # Python takes at most microseconds
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        text = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
