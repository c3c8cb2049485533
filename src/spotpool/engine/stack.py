"""One Spotpool's Pulumi stack: up, refresh, preview and destroy through the Automation API.

Every operation takes the stack's in-process lock (one operation per stack at a time), first
repairs what a killed run left behind (see recovery.py), and returns a typed result.
Credentials travel only as environment variables of the Pulumi run.
"""

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from spotpool.api.stackconfig import PROJECT, PoolIdentity, StackConfig
from spotpool.engine import recovery
from spotpool.engine.credentials import Credentials
from spotpool.engine.events import EventPrinter
from spotpool.engine.program import load_program
from spotpool.engine.results import (
    OperationKind,
    OperationResult,
    SlotOutput,
    changes_from_summary,
)
from spotpool.engine.settings import EngineSettings

SLOT_TYPE = "tencentcloud:Instance/instance:Instance"
NO_STOCK = "ResourceInsufficient"  # the cloud's error family for "no capacity"
_stack_locks: dict[str, threading.Lock] = {}
_stack_locks_guard = threading.Lock()


class EngineError(Exception):
    """A Pulumi operation failed; the message is for a person and holds no secrets."""


def _stack_lock(name: str) -> threading.Lock:
    with _stack_locks_guard:
        return _stack_locks.setdefault(name, threading.Lock())


@cache
def pulumi_command(root: Path) -> auto.PulumiCommand:
    if not (root / "bin" / "pulumi").exists():
        raise EngineError(f"no pulumi CLI at {root / 'bin'}: run `make toolchain`")
    return auto.PulumiCommand(root=str(root))


def slot_of_urn(urn: str) -> int | None:
    """Slot number from an instance URN (`…::<pool>-slot-<i>`)."""
    name = urn.rsplit("::", 1)[-1]
    head, sep, number = name.rpartition("-slot-")
    return int(number) if sep and head and number.isdigit() else None


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

    @property
    def name(self) -> str:
        return self.pool.stack_name

    # --- the four operations -------------------------------------------------------------

    def up(self, config: StackConfig, login_password: str | None = None) -> OperationResult:
        """Converge to `config`. When the cloud has no stock of a slot's instance type, that
        slot falls back to the next of `instanceTypes` and the up runs again."""
        with self._operation(OperationKind.UP) as (stack, result, state):
            owned = _ids_by_slot(state)
            config = _carried_over(config, state, owned)
            orphans = recovery.settle_orphans(self, config, owned)
            config = config.adopting(orphans.adoptable)
            result.recovered += orphans.notes()
            while True:
                self._set_config(stack, config, login_password)
                try:
                    reply = stack.up(on_event=self._printer(), color="never", suppress_outputs=True)
                    break
                except auto.CommandError as err:
                    if NO_STOCK not in str(err):
                        raise
                    placed = slots_in(_export(stack))
                    unplaced = [s for s in range(config.count) if s not in placed]
                    fallback = config.falling_back(unplaced)
                    if not unplaced or fallback is None:
                        raise
                    config = fallback
                    moved = ", ".join(f"slot {s} → {config.type_of(s)}" for s in unplaced)
                    result.recovered.append(f"no spot stock: {moved}")
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.instances = instances_of(reply.outputs)
        return result

    def refresh(self) -> OperationResult:
        with self._operation(OperationKind.REFRESH) as (stack, result, state):
            before = slots_in(state)
            reply = stack.refresh(on_event=self._printer(), color="never", show_secrets=False)
            after = slots_in(_export(stack))
            result.changes = changes_from_summary(reply.summary.resource_changes)
            result.gone_slots = sorted(slot for slot in before if slot not in after)
            owned = {slot: item.instance_id for slot, item in after.items()}
            orphans = recovery.settle_orphans(self, _previous_config(state), owned)
            result.orphan_slots = sorted(orphans.adoptable)
            result.recovered += orphans.notes("adopted by the next up")
            result.instances = [after[slot] for slot in sorted(after)]
        return result

    def preview(self, config: StackConfig, login_password: str | None = None) -> OperationResult:
        """What `up` with `config` would change, leaving no trace: the stack's config and state
        stay byte-identical (a throwaway workspace, no lock); a pool without a stack yet is
        previewed against an empty throwaway backend, so it shows as all-create."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="spotpool-preview-") as tmp:
            work_dir = Path(tmp) / "workspace"
            work_dir.mkdir()
            settings_file = self._work_dir() / f"Pulumi.{self.name}.yaml"
            if settings_file.exists():  # keeps the stack's encryption salt
                shutil.copy2(settings_file, work_dir / settings_file.name)
            try:
                try:
                    stack = self._select(work_dir=work_dir, create=False)
                except auto.StackNotFoundError:
                    stack = self._select(work_dir=work_dir, backend=f"file://{tmp}")
                self._set_config(stack, config, login_password, tag=False)
                lines: list[str] = []
                reply = stack.preview(diff=True, color="never", on_output=lines.append)
            except auto.CommandError as err:
                raise EngineError(f"preview of stack {self.name} failed: {_reason(err)}") from None
        return OperationResult(
            kind=OperationKind.PREVIEW,
            stack=self.name,
            changes=changes_from_summary(reply.change_summary),
            diff="\n".join(lines),
            seconds=round(time.monotonic() - started, 2),
        )

    def destroy(self, remove_stack: bool = True) -> OperationResult:
        with self._operation(OperationKind.DESTROY) as (stack, result, _):
            reply = stack.destroy(on_event=self._printer(), color="never")
            result.changes = changes_from_summary(reply.summary.resource_changes)
            # The state is empty now: any instance still tagged for the pool would leak.
            result.recovered += recovery.settle_orphans(self, None, {}).notes()
            if remove_stack:
                stack.workspace.remove_stack(self.name)
        return result

    def forget(self) -> None:
        """Drop the stack but leave its instances running (deletionPolicy Retain)."""
        with _stack_lock(self.name):
            self._select().workspace.remove_stack(self.name, force=True)

    def outputs(self) -> list[SlotOutput]:
        return instances_of(self._select().outputs())

    def state_instance_ids(self) -> dict[int, str]:
        """slot -> instance id, as the stack's state records them."""
        return _ids_by_slot(_export(self._select()))

    # --- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _operation(
        self, kind: OperationKind
    ) -> Iterator[tuple[auto.Stack, OperationResult, Mapping[str, Any]]]:
        """Lock, select, repair; yields the stack, its result and its state (one read)."""
        started = time.monotonic()
        with _stack_lock(self.name):
            mended = recovery.mend_backend_files(self)
            stack = self._select()
            result = OperationResult(kind=kind, stack=self.name, seconds=0.0)
            try:
                state = _export(stack)
                result.recovered = mended + recovery.repair(self, stack, state)
                if result.recovered:  # the repair changed the state
                    state = _export(stack)
                yield stack, result, state
            except auto.CommandError as err:
                raise EngineError(f"{kind} of stack {self.name} failed: {_reason(err)}") from None
            result.seconds = round(time.monotonic() - started, 2)

    def _work_dir(self) -> Path:
        return self.settings.work_root / self.name

    def _select(
        self, work_dir: Path | None = None, backend: str | None = None, create: bool = True
    ) -> auto.Stack:
        work_dir = work_dir or self._work_dir()
        work_dir.mkdir(parents=True, exist_ok=True)
        options = auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            pulumi_command=pulumi_command(self.settings.tools_dir.parent),
            env_vars=self._run_env(),
            secrets_provider="passphrase",
            project_settings=auto.ProjectSettings(
                name=PROJECT,
                runtime="python",
                backend=auto.ProjectBackend(url=backend or self.settings.backend_url),
            ),
        )
        choose = auto.create_or_select_stack if create else auto.select_stack
        return choose(
            self.name,
            project_name=PROJECT,
            program=load_program(self.settings.project_dir),
            opts=options,
        )

    def _run_env(self) -> dict[str, str]:
        env = {
            "PULUMI_CONFIG_PASSPHRASE": self.settings.passphrase.get_secret_value(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
            # The plugins are installed in Pulumi's home; the copies beside the CLI on PATH
            # would only earn a warning on every run.
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
            "TENCENTCLOUD_REGION": self.region,
            **self.credentials.provider_env(),
        }
        if self.settings.cloud_endpoint:
            # The provider talks to <service>.tencentcloudapi.com over plain HTTP, through the
            # emulator acting as the HTTP proxy: the provider's code path is the real one.
            env["TENCENTCLOUD_PROTOCOL"] = "HTTP"
            env["HTTP_PROXY"] = self.settings.cloud_endpoint
            env["http_proxy"] = self.settings.cloud_endpoint
        if home := os.environ.get("PULUMI_HOME"):
            env["PULUMI_HOME"] = home
        return env

    def _set_config(
        self, stack: auto.Stack, config: StackConfig, password: str | None, tag: bool = True
    ) -> None:
        values = {key: auto.ConfigValue(value) for key, value in config.to_pulumi_config().items()}
        if password is not None:
            values[f"{PROJECT}:loginPassword"] = auto.ConfigValue(password, secret=True)
        stack.set_all_config(values)
        if not tag:
            return
        wanted = {
            "spotpool:namespace": self.pool.namespace,
            "spotpool:name": self.pool.name,
            "spotpool:uid": self.pool.uid,
        }
        current = stack.list_tags()
        for key, value in wanted.items():
            if current.get(key) != value:
                stack.set_tag(key, value)

    def _printer(self) -> EventPrinter | None:
        return EventPrinter(self.on_progress) if self.on_progress else None


def _export(stack: auto.Stack) -> Mapping[str, Any]:
    return stack.export_stack().deployment or {}


def slots_in(state: Mapping[str, Any]) -> dict[int, SlotOutput]:
    """The pool's instances as a stack state records them (what refresh last saw)."""
    slots: dict[int, SlotOutput] = {}
    for resource in state.get("resources") or []:
        slot = slot_of_urn(resource.get("urn", ""))
        if resource.get("type") != SLOT_TYPE or not resource.get("id") or slot is None:
            continue
        out = resource.get("outputs") or {}
        slots[slot] = SlotOutput(
            slot=slot,
            instance_id=resource["id"],
            public_ip=out.get("publicIp") or None,
            private_ip=out.get("privateIp") or None,
            zone=out.get("availabilityZone"),
            instance_type=out.get("instanceType"),
            state=out.get("instanceStatus"),
        )
    return slots


def _ids_by_slot(state: Mapping[str, Any]) -> dict[int, str]:
    return {slot: item.instance_id for slot, item in slots_in(state).items()}


def _previous_config(state: Mapping[str, Any]) -> StackConfig | None:
    """The config of the stack's last up (the program exports it)."""
    roots = [r for r in state.get("resources") or [] if r.get("type") == "pulumi:pulumi:Stack"]
    output = (roots[0].get("outputs") or {}).get("config") if roots else None
    return StackConfig.model_validate(output) if isinstance(output, dict) else None


def _carried_over(
    config: StackConfig, state: Mapping[str, Any], owned: dict[int, str]
) -> StackConfig:
    """Carry the fallbacks and adoptions of the last config for the slots that kept their
    instance: dropping either would replace that instance."""
    previous = _previous_config(state)
    if previous is None:
        return config
    return config.keeping_fallbacks(previous, set(owned)).keeping_adopted(previous, owned)


def instances_of(outputs: Mapping[str, Any]) -> list[SlotOutput]:
    value = outputs.get("instances")
    raw = value.value if value is not None else None
    return [SlotOutput.model_validate(item) for item in raw or []]


def _reason(err: auto.CommandError) -> str:
    """The engine's own error lines, without the command line or environment."""
    text = str(getattr(err, "stderr", "") or "") or str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-4:])[:1500]
