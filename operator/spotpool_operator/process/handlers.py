"""The kopf handlers: they turn kopf's causes into Reconciler calls and failures into retries.

- create / update of the spec / resume → `converge` (an `up`);
- a daemon per pool → `check_reclaims` once every refreshInterval after the last operation,
  `start_surges` at once on a termination notice, `replace_gone` when the fleet probe saw one go;
- delete → the finalizer runs `delete` (destroy, or forget with deletionPolicy Retain).

Only pools of this install's class (spec.operatorClass = --operator-class) are seen at all:
every handler filters on it, and the finalizer's name carries a non-empty class, so installs
side by side never touch each other's pools, finalizers or status.

With shards (shards.py), a replica runs these only for the pools of the shards it holds: the
converge handlers filter on it, the daemon waits until the shard is this replica's and then
converges the pool as its new server (a takeover), and `delete` waits for the holder to act.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from spotpool.api.spec import GROUP, PLURAL, VERSION
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.pools import PoolRef, PoolState, operator_class
from spotpool_operator.cloud.interruptions import keep_learning
from spotpool_operator.convergence.node_hooks import NODE_LOOK
from spotpool_operator.process.kopf_storage import (
    ServedDiffBaseStorage,
    ServedProgressStorage,
    Serves,
)
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.reporting import policy_status
from spotpool_operator.reporting.kube import KubeCluster
from spotpool_operator.storm.notice_server import NoticeServer

log = logging.getLogger("spotpool_operator.handlers")

RESOURCE = (GROUP, VERSION, PLURAL)
HELD_LOOK = 5.0  # seconds between looks at the limits of a pool they hold (cached policies)
BLOCKING_THREADS = 32  # the event loop's pool for blocking calls (Secrets, status, SDK)
PREFIX = GROUP  # annotations and the finalizer carry the API group, not kopf's
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


def _retry_or_stop(problem: PoolProblem, delay: float) -> kopf.TemporaryError | kopf.PermanentError:
    if problem.permanent:
        return kopf.PermanentError(f"{problem.reason}: {problem.message}")
    return kopf.TemporaryError(f"{problem.reason}: {problem.message}", delay=delay)


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler) -> None:
    settings = reconciler.settings
    shards = reconciler.shards

    left_alone: set[tuple[str, str]] = set()  # (uid, class) of pools already said to be others'

    def mine(body: Mapping[str, Any], **_: Any) -> bool:
        """kopf's filter: the pool names this install's class. The first time a pool shows
        another class, the decision is logged (the tests wait for it: nothing else shows it)."""
        named = operator_class(body)
        if named == settings.operator_class:
            return True
        meta = body.get("metadata", {})
        seen = (str(meta.get("uid", "")), named)
        if seen not in left_alone:
            left_alone.add(seen)
            pool = f"{meta.get('namespace')}/{meta.get('name')}"
            log.info("pool %s is of operator class %r, not %r: left to its install",
                     pool, named, settings.operator_class)  # fmt: skip
        return False

    def served(body: Mapping[str, Any], **_: Any) -> bool:
        """kopf's filter: this install's pool, and this replica holds the pool's shard."""
        uid = str(body.get("metadata", {}).get("uid", ""))
        return mine(body) and (shards is None or shards.serves(uid))

    async def converge(body: Mapping[str, Any], retry: int, logger: Logger, **_: Any) -> None:
        try:
            await reconciler.converge(PoolRef.from_body(body, logger))
        except PoolProblem as problem:
            raise _retry_or_stop(problem, settings.backoff(retry)) from None

    for decorator in (kopf.on.create, kopf.on.resume):
        decorator(*RESOURCE, registry=registry, id="converge", when=served)(converge)
    kopf.on.update(*RESOURCE, registry=registry, id="converge", field="spec", when=served)(converge)

    @kopf.on.delete(*RESOURCE, registry=registry, id="delete", when=mine)
    async def delete(body: Mapping[str, Any], retry: int, logger: Logger, **_: Any) -> None:
        ref = PoolRef.from_body(body, logger)
        if shards is not None and not shards.serves(ref.uid):
            # Not filtered out like the others: kopf would drop the finalizer of a pool no
            # handler of this replica wants. Wait for the shard; its holder deletes meanwhile.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shards.served_event(ref.uid).wait(), settings.lease_duration)
            if not shards.serves(ref.uid):
                raise kopf.TemporaryError(
                    f"NotServed: shard {shards.shard(ref.uid)} is another replica's",
                    delay=settings.lease_duration / 3,
                )
        if shards is not None:
            shards.know(ref.uid, ref.identity.stack_name)
        try:
            await reconciler.delete(ref)
        except PoolProblem as problem:  # deleting is never given up: the finalizer waits
            raise kopf.TemporaryError(
                f"{problem.reason}: {problem.message}", delay=settings.backoff(retry)
            ) from None
        if shards is not None:
            shards.forget(ref.uid)

    @kopf.daemon(*RESOURCE, registry=registry, id="reclaims", cancellation_timeout=5.0, when=mine)
    async def watch_reclaims(
        body: Mapping[str, Any], stopped: kopf.DaemonStopped, logger: Logger, **_: Any
    ) -> None:
        """Replace what the fleet probe saw go at once; refresh every refreshInterval after the
        pool's last operation; back off on failure."""
        failures, not_before = 0, 0.0
        first = PoolRef.from_body(body, logger)
        served, settle = -1, False  # served: the shard's epoch this daemon settled in
        if shards is not None:
            shards.know(first.uid, first.identity.stack_name)
        while not stopped:
            ref = PoolRef.from_body(body, logger)  # the daemon's body is kept up to date
            if shards is not None and not shards.serves(ref.uid):
                await _sleep(stopped, shards.served_event(ref.uid), settings.lease_duration / 3)
                continue
            epoch = shards.epoch(ref.uid) if shards is not None else 0
            if served != epoch:  # served from now on (at start, or the shard came here again)
                served, settle = epoch, shards is not None
            pool = reconciler.pool(ref)
            backing_off = not_before - time.monotonic()
            if settle:
                if backing_off > 0:
                    await _sleep(stopped, None, backing_off)  # the converge takes any news too
                    continue
                try:
                    await reconciler.converge(ref)  # no up when the stack applied this spec
                    settle, failures, not_before = False, 0, 0.0
                except PoolProblem as problem:
                    settle = not problem.permanent
                    failures += 1
                    not_before = time.monotonic() + settings.backoff(failures - 1)
                continue
            urgent = pool.has_news
            # urgent work waits out only its backoff, not the next refresh
            wait = backing_off if urgent else max(reconciler.refresh_due_in(ref), backing_off)
            # held by a limit: the admin may raise it; looked at every HELD_LOOK seconds
            moved = wait > 0 and bool(pool.limit_note) and backing_off <= 0
            if moved and not await _limits_moved(reconciler, ref):
                moved, wait = False, min(wait, HELD_LOOK)
            if wait > 0 and not moved and not urgent and await reconciler.look_at_nodes(ref):
                wait = min(wait, NODE_LOOK)  # spec.nodes: its nodes looked at every few seconds
            if wait > 0 and not moved:
                if urgent:  # urgent work waits out its backoff, and only that
                    await _sleep(stopped, None, wait)
                else:
                    await rest(stopped, pool, wait)
                continue  # re-read: an operation may have moved the due time meanwhile
            try:
                if moved:  # the namespace's limits changed: grow now if they allow it
                    await reconciler.grow_held(ref)
                    await rest(stopped, pool, HELD_LOOK)  # never a busy loop
                elif pool.noticed:  # a reclaim ahead: its replacement starts now
                    await reconciler.start_surges(ref)
                elif pool.gone_slots:
                    await reconciler.replace_gone(ref)
                elif pool.checkpoints:  # onNotice results: status and Events
                    await reconciler.record_checkpoints(ref)
                else:
                    await reconciler.retire_stale_surges(ref)
                    await reconciler.check_reclaims(ref)
                    await reconciler.return_to_spot(ref)  # on-demand fallbacks, when due
                failures, not_before = 0, 0.0
            except Exception as error:  # a daemon that dies stops watching: back off instead
                if not isinstance(error, PoolProblem):
                    logger.exception("reclaim check failed unexpectedly")
                failures += 1
                not_before = time.monotonic() + settings.backoff(failures - 1)
        if shards is not None and body.get("metadata", {}).get("deletionTimestamp"):
            shards.forget(first.uid)  # deleted: its shard's holder knows it while deleting
        if not mine(body):  # moved to another install's class: kopf stopped this daemon
            reconciler.forget(first)
            if shards is not None:
                shards.forget(first.uid)

    @kopf.on.startup(registry=registry)
    async def start_background(memo: kopf.Memo, **_: Any) -> None:
        """The shards' Leases first (nothing is written without them), then the fleet probe."""
        # Secret reads and status writes go through to_thread: in a storm hundreds of pools
        # need them at once, and the default pool (cores + 4 threads) would queue them.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=BLOCKING_THREADS, thread_name_prefix="blocking")
        )
        if shards is not None:
            memo["shards"] = asyncio.create_task(shards.run(), name="shards")
            await asyncio.to_thread(shards.first_step.wait, settings.lease_duration)
        if reconciler.probe is not None:
            memo["probe"] = asyncio.create_task(reconciler.probe.run(), name="fleet-probe")
        if reconciler.strays is not None:
            memo["strays"] = asyncio.create_task(reconciler.strays.run(), name="stray-sweep")
        memo["grants"] = asyncio.create_task(reconciler.keep_checking_grants(), name="grants")
        memo["claims"] = asyncio.create_task(reconciler.keep_claiming(), name="claims")
        if isinstance(reconciler.cluster, KubeCluster):  # the access policies' use
            served = None if settings.all_namespaces else list(settings.namespaces)
            first = (lambda: shards.holds(0)) if shards is not None else (lambda: True)
            memo["policies"] = asyncio.create_task(
                policy_status.keep_writing(reconciler.cluster, served, first), name="policies"
            )
        learner = reconciler.capacity.learner if reconciler.capacity is not None else None
        if learner is not None:
            try:  # what earlier runs and the other replicas learned, before the first placement
                await asyncio.to_thread(learner.load)
            except Exception as error:  # placement works without it; keep_learning retries
                log.warning("reading the interruption counts failed: %s", type(error).__name__)
            memo["learner"] = asyncio.create_task(
                keep_learning(learner, reconciler.running_spot), name="interruption-learner"
            )
        if settings.notice_port:
            server = NoticeServer(reconciler, settings.notice_host, settings.notice_port)
            await server.start()
            memo["notices"] = server

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """The same configuration as kube.py's client: service account, else KUBECONFIG."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    async def close(memo: kopf.Memo, **_: Any) -> None:
        server = memo.get("notices")
        if isinstance(server, NoticeServer):
            await server.stop()
        for name in ("learner", "policies", "grants", "claims", "strays", "probe", "shards"):
            task = memo.get(name)
            if isinstance(task, asyncio.Task):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        reconciler.close()
        if reconciler.claims is not None:  # with the Leases: nothing would vouch for it
            with contextlib.suppress(Exception):
                await asyncio.to_thread(reconciler.claims.release)
        if shards is not None:  # a successor need not wait for them to expire
            await asyncio.to_thread(shards.release_all)


async def _limits_moved(reconciler: Reconciler, ref: PoolRef) -> bool:
    try:
        return await reconciler.limits_moved(ref)
    except Exception:  # the policies not read now: the pool's next refresh looks again
        return False


async def rest(stopped: kopf.DaemonStopped, pool: PoolState, seconds: float) -> None:
    """A pool's daemon with nothing urgent sleeps until `seconds` pass, it is stopped, or news
    comes (`pool.wake`); news that came while it looked (or its shard went): no sleep. A wake
    left set with its news already handled is spent here: left set, every later rest would
    return at once, and the daemon would spin (200,000 turns in 100 s before this)."""
    if pool.has_news or pool.released:
        return
    pool.wake.clear()
    await _sleep(stopped, pool.wake, seconds)


async def _sleep(stopped: kopf.DaemonStopped, wake: asyncio.Event | None, seconds: float) -> None:
    """Sleep until `seconds` pass, the daemon is stopped, or `wake` is set."""
    waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stopped.wait())]
    if wake is not None:
        waiters.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def configure(
    settings: kopf.OperatorSettings, serves: Serves | None = None, operator_class: str = ""
) -> None:
    """kopf's bookkeeping in annotations (the status schema is ours), Events only from us;
    with `serves` (shards), written only for the pools this replica serves. The finalizer is
    the install class's own: kopf removes its finalizer from a pool no handler wants, so a
    shared one would be taken off the other install's pools."""
    suffix = f"-{operator_class}" if operator_class else ""
    settings.persistence.finalizer = f"{PREFIX}/finalizer{suffix}"
    everything: Serves = lambda uid: True  # noqa: E731
    settings.persistence.progress_storage = ServedProgressStorage(
        serves or everything, prefix=PREFIX
    )
    settings.persistence.diffbase_storage = ServedDiffBaseStorage(
        serves or everything, prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.CRITICAL  # reasons and messages are the reconciler's
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
