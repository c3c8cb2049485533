"""One Spotpool's Pulumi stack: up, refresh, preview and destroy through the Automation API.

Every operation takes the stack's in-process lock (one operation per stack at a time), first
repairs what a killed run left behind (see recovery.py), and returns a typed result
(stack_operation.py runs that frame). Credentials travel only as environment variables of the
Pulumi run (stack_workspace.py).
"""

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pulumi import automation as auto

from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.basics.errors import (
    EngineError,
    InstancesRemain,
    OperationTimeout,
    StackLockedError,
)
from spotpool.engine.basics.results import (
    OperationKind,
    OperationResult,
    SlotOutput,
    changes_from_summary,
)
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.fencing.processes import kill_runs
from spotpool.engine.launches import fast_launch, launch_intents, surges
from spotpool.engine.launches.fast_launch import FastLaunch
from spotpool.engine.launches.notice_nonces import held_nonces, plan_nonces
from spotpool.engine.leftovers import dead_runs, recovery
from spotpool.engine.leftovers.orphans import waited_for
from spotpool.engine.leftovers.retained import mark_retained
from spotpool.engine.runs.config_writer import nonces_last_set, write_config
from spotpool.engine.runs.known_stacks import (
    forget_known,
    forget_stack,
    known_already,
    known_stack,
    remember_urns,
    stack_lock,
)
from spotpool.engine.runs.stack_operation import operation, progress_printer, targeted_up
from spotpool.engine.runs.stack_workspace import pulumi_env, select_stack
from spotpool.engine.stacks import stack_preview
from spotpool.engine.stacks.replan import Replan, replanned
from spotpool.engine.state import checkpoint_guard
from spotpool.engine.state.drift import drift_in
from spotpool.engine.state.stack_state import (
    applied_config_in,
    carried_over,
    ids_by_slot,
    ids_by_surge,
    instances_of,
    pinned,
    slots_in,
    state_of,
    surge_plan,
    tagged_for,
    urns_by_slot,
)
from spotpool.engine.tencent.credentials import Credentials

# forget_stack and Replan: importers of this module use them from here.
__all__ = [
    "EngineError",
    "OperationTimeout",
    "PoolStack",
    "Replan",
    "StackLockedError",
    "forget_stack",
]


class PoolStack:
    def __init__(
        self,
        pool: PoolIdentity,
        settings: EngineSettings,
        credentials: Credentials,
        region: str,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.credentials = credentials
        self.region = region
        self.on_progress = on_progress
        self.dead_run_slots: frozenset[int] = frozenset()  # a killed run was creating these

    @property
    def name(self) -> str:
        return self.pool.stack_name

    def run_env(self) -> dict[str, str]:
        """The environment of every Pulumi run of this stack (credentials travel only there)."""
        return self._run_env()

    def _run_env(self) -> dict[str, str]:  # the name bench/backend_size.py swaps
        return pulumi_env(self)

    # --- the four operations -------------------------------------------------------------

    def up(
        self,
        config: StackConfig,
        login_password: str | None = None,
        refresh: bool = False,
        replan: Replan | None = None,
        fresh: Iterable[int] = (),
        target: Sequence[str] = (),
    ) -> OperationResult:
        """Converge to `config`. When the cloud has no stock for a slot, `replan` places it
        elsewhere (by default: the next of `instanceTypes`) and the up runs again. `refresh`:
        look at the cloud first, in the same run (instances gone while nobody watched).
        `fresh`: slots whose instance is gone (their next one is a new generation).
        `target`: only these URNs (a rollout's batch, rollout.py); the rest stay as they are."""
        with operation(self, OperationKind.UP) as (stack, result, state):
            surging, slot_urns = ids_by_surge(state), urns_by_slot(state)
            if refresh and config.notice_agent is not None and slot_urns:
                # A slot the refresh drops gets its next instance in this run: refresh first,
                # so that instance is a new generation (notice_nonces), not the dropped one's.
                stack.refresh(color="never", show_secrets=False)
                state = state_of(stack)
                surging, slot_urns, refresh = ids_by_surge(state), urns_by_slot(state), False
            launched = launch_intents.read_intent(self)  # the fast path's, to adopt (fast_launch)
            noticed = [slot_urns[s] for s in surging if s in slot_urns] if refresh else []
            if noticed := noticed + launched.stale_urns(slot_urns, ids_by_slot(state)):
                # A surge's slot: a refresh inside the up would drop a taken instance and then
                # create a new one beside the surge; refresh first, so the surge takes the slot.
                # A fast-path launch's slot likewise: its reclaimed instance leaves first.
                stack.refresh(target=noticed, color="never", show_secrets=False)
                state = state_of(stack)
                surging = ids_by_surge(state)
            owned = ids_by_slot(state)
            config = carried_over(config, state, owned)
            surge, promote = surge_plan(set(owned), set(surging), config.count)
            launched = launched.without(promote)  # a surge instance takes these slots
            config = launched.placed(pinned(config, applied_config_in(state), promote), owned)
            # What this install's failed creates made must be listed before the sweep decides
            # (or the slot gets a second instance): their ids waited for, and an unanswered
            # one's listing lag waited out (dead_runs.LISTING_LAG at most).
            records = dead_runs.read(self, with_ids=True) if self.dead_run_slots else None
            if records is not None and (lag := dead_runs.lag_left(records)) > 0:
                time.sleep(lag)
            swept_at = time.time()
            orphans = recovery.sweep_orphans(
                self, config, owned, cap=config.count,
                dead_run_slots=self.dead_run_slots | frozenset(launched.free(owned)),
                held=frozenset(surging.values()) | launched.protected(owned),
                expected=frozenset(lt.instance_id for lt in launched.slots.values()
                                   if lt.instance_id) | frozenset(records.ids if records else ()),
            )  # fmt: skip
            config = config.adopting(orphans.adoptable)
            # The fast path's launches adopted as planned are its replacements, said once by
            # the caller (Replaced); only true orphans are recoveries.
            planned = {s: lt.instance_id for s, lt in launched.free(owned).items()}
            result.recovered += orphans.notes(planned=planned)
            nonces = plan_nonces(held_nonces(state), config.count, surge, promote, fresh)
            nonces.update(launched.nonces(orphans.adoptable))
            while True:
                write_config(
                    self, stack, config, login_password, surge=surge, promote=promote, nonces=nonces
                )
                try:
                    reply = stack.up(
                        on_event=progress_printer(self), color="never", suppress_outputs=True,
                        refresh=refresh, target=list(target) or None,
                    )  # fmt: skip
                    break
                except auto.CommandError as err:
                    config = replanned(stack, config, err, range(config.count), replan, result)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.instances = instances_of(reply.outputs)
            result.surges = instances_of(reply.outputs, "surges")
            remember_urns(self, state_of(stack))
            launch_intents.settle(self, launched, {i.slot: i.instance_id for i in result.instances})
            if self.dead_run_slots or result.changes.create or result.changes.replace:
                # Swept with the proof: adopted or gone; this run's creates, once held.
                held_ids = [i.instance_id for i in result.instances + result.surges]
                dead_runs.settle(self, swept_at, held_ids)
                self.dead_run_slots = frozenset()
        return result

    def launch_replacements(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> FastLaunch:
        """The storm fast path: launch `slots`' next instances through the cloud API now;
        the next `up` (or `replace_slots`) adopts them (fast_launch.py)."""
        if self.settings.guard is not None:
            self.settings.guard.check(self)
        return fast_launch.launch_replacements(self, config, slots, login_password)

    def replace_slots(
        self,
        config: StackConfig,
        slots: list[int],
        login_password: str | None = None,
        replan: Replan | None = None,
    ) -> OperationResult:
        """Replace the instances the cloud took from `slots`, in one Pulumi run: `up` with a
        refresh of just those slots (the refresh drops the gone instance from the state, the up
        creates its successor). No full refresh, no look at the other slots: the fleet probe
        already told which slots are gone. Falls back to a full `up` with a refresh when this
        process does not know the slots' URNs or has not repaired the stack yet."""
        known = known_already(self)  # no select here: the operation mends first
        urns = [known.urns[s] for s in slots if s in known.urns] if known else []
        if (
            known is None
            or len(urns) != len(slots)
            or not known.repaired
            or not known.config
            or launch_intents.has_pending(self)  # fast-path instances (any writer's): an up adopts
        ):
            return self.up(config, login_password, refresh=True, replan=replan, fresh=slots)
        promote = sorted(s for s in slots if s in known.surges and s < config.count)
        with operation(self, OperationKind.UP, light=not promote) as (stack, result, state):
            if promote:  # the slot's instance is going: its surge instance takes the slot
                config = pinned(config, applied_config_in(state), promote)
                surges.forget_resources(stack, [known.urns[s] for s in promote])
            surge = sorted(s for s in known.surges if s not in promote and s < config.count)
            refresh = len(promote) < len(slots)  # only the gone ones: the rest left already
            # What this process last set (the run it set them for succeeded, or it would have
            # forgotten): untargeted instances keep theirs; the gone slots' next are new.
            held = {**nonces_last_set(known.config), **held_nonces(state)}
            nonces = plan_nonces(
                held, config.count, surge, promote, fresh=[s for s in slots if s not in promote]
            )
            if promote and refresh:  # a refresh cannot target a promoted slot's new name
                gone = [known.urns[s] for s in slots if s not in promote]
                stack.refresh(target=gone, color="never", show_secrets=False)
                refresh = False
            while True:
                write_config(
                    self, stack, config, login_password, surge=surge, promote=promote, nonces=nonces
                )
                try:
                    targeted_up(self, stack, result, urns, refresh=refresh)
                    break
                except auto.CommandError as err:  # no stock: the slots go elsewhere, same URNs
                    config = replanned(stack, config, err, slots, replan, result)
            # A created or promoted instance keeps its slot's URN: the known URNs stay right.
            known.surges = {s.slot: s.instance_id for s in result.surges}
        return result

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        """Start the replacement of `slots` ahead of their reclaim (a termination notice came):
        one targeted `up` that creates a surge instance beside each slot's instance, which
        keeps running until the cloud takes it; `replace_slots` then promotes the surge
        instance into the slot. With no slot it can surge (none of `slots` has an instance in
        the state), no run at all: an untargeted up here would converge the whole pool.
        The config is carried over and pinned like any up's, so the config the stack records
        keeps every slot's placement, fallback and adoption."""
        return surges.start_surge(self, config, slots, login_password)

    def retire_surges(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        """Delete the surge instances of `slots` (their slot's instance outlived its notice: the
        reclaim never came), in one targeted `up`; the slots' own instances stay."""
        return surges.retire_surges(self, config, slots, login_password)

    def refresh(self) -> OperationResult:
        with operation(self, OperationKind.REFRESH) as (stack, result, state):
            before = slots_in(state)
            reply = stack.refresh(
                on_event=progress_printer(self), color="never", show_secrets=False
            )
            exported = state_of(stack)
            remember_urns(self, exported)
            after = slots_in(exported)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.gone_slots = sorted(slot for slot in before if slot not in after)
            result.drift = drift_in(exported)
            owned = {slot: item.instance_id for slot, item in after.items()}
            previous = applied_config_in(state)
            orphans = recovery.sweep_orphans(
                self, previous, owned, cap=previous.count if previous else len(owned),
                dead_run_slots=self.dead_run_slots,
                held=frozenset(ids_by_surge(exported).values()),
            )  # fmt: skip
            result.orphan_slots = sorted(orphans.adoptable)
            result.recovered += orphans.notes("adopted by the next up")
            result.instances = [after[slot] for slot in sorted(after)]
        return result

    def preview(
        self,
        config: StackConfig,
        login_password: str | None = None,
        keep_secret_inputs: Sequence[str] = (),
    ) -> OperationResult:
        """What `up` with `config` would change, leaving no trace: the stack's config and state
        stay byte-identical (a throwaway workspace, no lock); a pool without a stack yet is
        previewed against an empty throwaway backend, so it shows as all-create.
        `keep_secret_inputs`: instance inputs (`password`, `userDataRaw`) that keep what the state
        holds (a preview copy's placeholders) instead of this run's: the unchanged secrets."""
        return stack_preview.preview(self, config, login_password, keep_secret_inputs)

    def destroy(self, remove_stack: bool = True) -> OperationResult:
        with operation(self, OperationKind.DESTROY) as (stack, result, state):
            held = len(slots_in(state)) + len(ids_by_surge(state))
            # Refresh first: an instance the cloud already took back (a reclaim) leaves the
            # state, or its TerminateInstances is answered InvalidInstanceId.NotFound, the
            # provider fails the delete and the pool never finishes deleting.
            reply = stack.destroy(on_event=progress_printer(self), color="never", refresh=True)
            result.changes = changes_from_summary(reply.summary.resource_changes)
            # The state is empty now: any instance still tagged for the pool would leak.
            launched = launch_intents.read_intent(self)  # the fast path's go too, young or not
            # What this install's creates were answered with goes by id, listed yet or not.
            records = dead_runs.read(self, with_ids=True)
            result.recovered += recovery.terminate_recorded(self, records.ids)
            orphans = recovery.sweep_orphans(
                self, None, {}, cap=held + len(launched.slots) + len(records.creates),
                dead_run_slots=self.dead_run_slots | frozenset(launched.slots) | records.slots,
                held=frozenset(records.ids),
            )  # fmt: skip
            result.recovered += orphans.notes()
            left = waited_for(orphans.left) + recovery.unanswered_creates(records, orphans)
            if remove_stack and left:
                # Young ones may be a create in flight: keep the stack (it names the pool for
                # the next sweep) and let the caller come back once they are old enough.
                raise InstancesRemain(self.name, {d.instance_id: d.reason for d in left})
            launch_intents.forget(self)
            dead_runs.settle(self, None)
            if remove_stack:
                stack.workspace.remove_stack(self.name)
                forget_known(self)
                if self.settings.guard is not None:
                    self.settings.guard.release(self)
        return result

    def cancel(self) -> list[int]:
        """Kill this stack's running Pulumi CLI and everything under it (plugins included);
        the operation then fails, and the next one removes the lock the kill left."""
        return kill_runs(self.name)

    def forget(self) -> None:
        """Drop the stack but leave its instances running (deletionPolicy Retain)."""
        held = list(self.held_instance_ids().values())  # named in the Retain record
        with stack_lock(self.name):
            if self.settings.guard is not None:  # another cluster's stack is not ours to drop
                self.settings.guard.check(self)
            mark_retained(self, held)  # or the sweep of deleted pools' instances takes them
            select_stack(self).workspace.remove_stack(self.name, force=True)
            launch_intents.forget(self)  # the fast path's instances stay, as the others
            dead_runs.settle(self, None)
            forget_known(self)
            if self.settings.guard is not None:
                self.settings.guard.release(self)

    def outputs(self) -> list[SlotOutput]:
        return instances_of(select_stack(self).outputs())

    def applied_config(self) -> StackConfig | None:
        """The config the stack's last `up` applied (the program exports it), or None (also
        when an instance it holds lacks this cluster's tag: a stack taken
        over by a rebuilt cluster, or made before the cluster tag, runs one `up`). Read
        straight from a self-managed backend's checkpoint when it can be (no CLI run: a
        restart over a thousand pools reads a thousand of them), else through the CLI."""
        with stack_lock(self.name):
            checkpoint_guard.undo_late_save(self)
            checkpoint = recovery.read_checkpoint(self)
            try:
                state = checkpoint or state_of(known_stack(self).stack)
            except auto.CommandError:
                forget_known(self)
                return None
            if not tagged_for(state, self.settings.cluster_id, self.settings.install_id):
                return None  # an earlier release's tags, another cluster's or install's: an up
            return applied_config_in(state)

    def state_instance_ids(self) -> dict[int, str]:
        """slot -> instance id, as the stack's state records them."""
        return ids_by_slot(self._state())

    def _state(self) -> Mapping[str, Any]:
        """The state read outside an operation, a late save over it undone first."""
        with stack_lock(self.name):
            checkpoint_guard.undo_late_save(self)
            return state_of(select_stack(self))

    def held_instance_ids(self) -> dict[str, str]:
        """Every instance the state holds, the slots' and the surges' (`slot-N` / `surge-N`
        -> instance id): what Retain keeps and deleting must account for."""
        state = self._state()
        held = {f"slot-{s}": i for s, i in ids_by_slot(state).items()}
        return held | {f"surge-{s}": i for s, i in ids_by_surge(state).items()}
