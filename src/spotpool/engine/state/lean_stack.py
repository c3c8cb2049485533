"""An Automation API stack that starts fewer Pulumi CLI processes per operation.

After `up`, the Automation API runs three more CLI processes to build its result: `stack output
--json`, `stack output --json --show-secrets` and `stack history --page-size 1`. Each costs a
process start and a backend read (0.2-0.5 s, more on a busy node), and the engine then exports
the state anyway. Here the outputs come from that one export (kept for the engine's own next
look), and the change summary from the run's own summary event: an `up` costs the run and one
export, a targeted replacement two CLI processes instead of four. A stack is opened in one
`stack select --create` run (the Automation API runs a failing select, then `stack init`), and
a stack that run just created is known to be empty: no export, no tag listing before its `up`.

On a self-managed backend (`file://`, `s3://`) more goes without the CLI — each CLI run costs
0.2 CPU-s to start and, when it opens the stack's secrets, 0.15 more to derive the passphrase
key (1,000,000 PBKDF2 rounds): the state the engine reads (slots, ids, URNs, the last config:
nothing secret) comes from the checkpoint file itself, its secrets left encrypted; an `up`'s
outputs come from the run's own event for the stack resource (when none of them is secret);
and the stack's tags are written as the file `pulumi stack tag set` writes.
"""

import json
import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from minio.error import S3Error
from pulumi import automation as auto
from pulumi.automation import events
from pulumi.automation._stack import StackInitMode

from spotpool.engine.state.backend_files import ROOT, BackendFiles, latest_deployment, open_backend

STACK_TYPE = "pulumi:pulumi:Stack"
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value in state
SUMMARY_WAIT = 5.0  # seconds to wait for the run's summary event before asking the history
MASKED = "[secret]"  # what an engine event shows of a secret value

OnEvent = Callable[[events.EngineEvent], Any]


class LeanStack(auto.Stack):
    """`auto.Stack` whose operations read their result from what the run itself reported."""

    _summary: events.SummaryEvent | None
    _summary_seen: threading.Event
    _exported: auto.Deployment | None
    _run_outputs: dict[str, Any] | None  # the stack resource's outputs, as the last run said
    files: BackendFiles | None  # the backend's files, when self-managed
    project: str
    created: bool  # the run that opened it created it: empty, no tags, until its first run

    @classmethod
    def open(cls, name: str, workspace: auto.LocalWorkspace, create: bool) -> "LeanStack":
        """Select the stack `name` in `workspace` in one CLI run, creating it if `create`
        (raises `auto.StackNotFoundError` when it does not exist and `create` is off)."""
        args = ["stack", "select", "--stack", name]
        if create:
            args += ["--create", "--secrets-provider", workspace.secrets_provider or "passphrase"]
        reply = workspace._run_pulumi_cmd_sync(args)  # the workspace's own env and home
        return cls._build(
            name, workspace, create and f"Created stack '{name}'" in reply.stdout + reply.stderr
        )

    @classmethod
    def made(cls, name: str, workspace: auto.LocalWorkspace) -> "LeanStack":
        """A stack whose checkpoint was just written without the CLI (backend_files.py)."""
        return cls._build(name, workspace, created=True)

    @classmethod
    def _build(cls, name: str, workspace: auto.LocalWorkspace, created: bool) -> "LeanStack":
        lean = cls.__new__(cls)
        lean.name, lean.workspace, lean._mode = name, workspace, StackInitMode.SELECT
        lean._summary, lean._summary_seen, lean._exported = None, threading.Event(), None
        lean._run_outputs = None
        settings = workspace.project_settings()  # the Pulumi.yaml the workspace wrote
        lean.project = settings.name
        url = (settings.backend.url if settings.backend else None) or os.environ.get(
            "PULUMI_BACKEND_URL", ""
        )
        lean.files = open_backend(url or "", {**os.environ, **(workspace.env_vars or {})})
        lean.created = created
        return lean

    # --- the operations: capture the run's summary ------------------------------------------

    # Keyword arguments only, as the engine calls them.
    def up(self, **kwargs: Any) -> auto.UpResult:  # type: ignore[override]
        return super().up(**self._capturing(kwargs))

    def refresh(self, **kwargs: Any) -> auto.RefreshResult:  # type: ignore[override]
        return super().refresh(**self._capturing(kwargs))

    def destroy(self, **kwargs: Any) -> auto.DestroyResult:  # type: ignore[override]
        return super().destroy(**self._capturing(kwargs))

    def _capturing(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The operation's arguments with an `on_event` that also keeps its summary event."""
        self._summary, self._exported, self.created = None, None, False
        self._run_outputs = None
        self._summary_seen.clear()
        on_event: OnEvent | None = kwargs.get("on_event")

        def capture(event: events.EngineEvent) -> None:
            if event.summary_event is not None:
                self._summary = event.summary_event
                self._summary_seen.set()
            done = event.res_outputs_event
            if done is not None and done.metadata.type == STACK_TYPE and done.metadata.new:
                self._run_outputs = dict(done.metadata.new.outputs or {})
            if on_event is not None:
                on_event(event)

        return {**kwargs, "on_event": capture}

    # --- what the Automation API asks after a run -------------------------------------------

    def info(self, show_secrets: bool = True) -> auto.UpdateSummary | None:
        """The last run's summary from its own summary event (no `stack history` run); the
        history when there was none (no run yet, or its event did not come)."""
        if self._summary is None and not self._summary_seen.wait(SUMMARY_WAIT):
            return super().info(show_secrets)
        summary, self._summary = self._summary, None
        assert summary is not None
        now = datetime.now(UTC)
        return auto.UpdateSummary(
            kind="update",
            start_time=now,
            message="",
            environment={},
            config={},
            result="succeeded",
            end_time=now,
            resource_changes=dict(summary.resource_changes),
        )

    def outputs(self) -> auto.OutputMap:
        """The stack's outputs: those the last run's event gave, when none is secret (no CLI
        run); else from one export (kept for the next `export_stack`), not from two `stack
        output` runs."""
        said, self._run_outputs = self._run_outputs, None
        if said is not None and not _masked(said):
            return {key: auto.OutputValue(value, secret=False) for key, value in said.items()}
        self._exported = super().export_stack()
        return outputs_of(self._exported.deployment or {})

    def read_state(self) -> Mapping[str, Any]:
        """The stack's latest deployment, its secrets left encrypted: straight from the
        checkpoint file of a self-managed backend (no CLI run, no key derivation), else from
        an export. For what the engine reads — slots, ids, URNs, the last config — never a
        secret."""
        if self.files is not None and not self.created:
            latest = latest_deployment(self.files, self.project, self.name)
            if latest is not None:
                return latest
        return self.export_stack().deployment or {}

    def ensure_tags(self, wanted: Mapping[str, str]) -> bool:
        """Give the stack these tags (keeping any others), as `pulumi stack tag set` stores
        them on a self-managed backend: one read and at most one write instead of a CLI run to
        list them and one a tag. False when the backend is not one (the caller runs the CLI)."""
        if self.files is None:
            return False
        key = f"{ROOT}/stacks/{self.project}/{self.name}.pulumi-tags"
        current: dict[str, str] = {}
        if not self.created:
            try:
                current = dict(json.loads(self.files.read(key)).get("tags") or {})
            except (FileNotFoundError, S3Error) as err:  # no tags yet
                if isinstance(err, S3Error) and err.code != "NoSuchKey":
                    raise
        if all(current.get(k) == v for k, v in wanted.items()):
            return True
        body = json.dumps({"version": 1, "tags": {**current, **wanted}}, indent=4).encode()
        self.files.write(key, body)
        return True

    def forget_export(self) -> None:
        """Drop a kept export: called before each operation, whose state may have moved."""
        self._exported = None

    def export_stack(self) -> auto.Deployment:
        """The export `outputs()` just made, once; otherwise a fresh one."""
        exported, self._exported = self._exported, None
        return exported if exported is not None else super().export_stack()


def outputs_of(deployment: Mapping[str, Any]) -> auto.OutputMap:
    """The root stack resource's outputs in a (`--show-secrets`) export, as the CLI gives them."""
    for resource in deployment.get("resources") or []:
        if resource.get("type") == STACK_TYPE:
            return {key: _output(value) for key, value in (resource.get("outputs") or {}).items()}
    return {}


def _masked(value: Any) -> bool:
    """Whether an event's value holds a secret (the event shows it masked)."""
    if isinstance(value, dict):
        return any(_masked(v) for v in value.values())
    if isinstance(value, list):
        return any(_masked(v) for v in value)
    return bool(value == MASKED)


def _output(value: Any) -> auto.OutputValue:
    if isinstance(value, dict) and value.get(SECRET_SIG):
        plaintext = value.get("plaintext")
        return auto.OutputValue(json.loads(plaintext) if plaintext else None, secret=True)
    return auto.OutputValue(value, secret=False)
