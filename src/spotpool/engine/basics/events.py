"""Engine events turned into short progress lines (`creating pool-slot-3`), never secrets."""

from collections.abc import Callable

from pulumi.automation import events

_VERBS = {
    "create": "creating",
    "update": "updating",
    "replace": "replacing",
    "create-replacement": "creating replacement for",
    "delete-replaced": "deleting replaced",
    "delete": "deleting",
    "refresh": "refreshing",
    "read": "reading",
}


class EventPrinter:
    """An `on_event` callback for the Automation API that reports what the engine does."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def __call__(self, event: events.EngineEvent) -> None:
        if event.resource_pre_event is not None:
            meta = event.resource_pre_event.metadata
            op = str(meta.op.value if hasattr(meta.op, "value") else meta.op)
            if op != "same" and not meta.type.startswith("pulumi:"):
                self.say(f"{_VERBS.get(op, op)} {_name(meta.urn)}")
        elif event.res_op_failed_event is not None:
            meta = event.res_op_failed_event.metadata
            self.say(f"failed: {meta.op} {_name(meta.urn)}")
        elif event.diagnostic_event is not None:
            diag = event.diagnostic_event
            if diag.severity in ("error", "warning") and not diag.ephemeral:
                self.say(f"{diag.severity}: {diag.message.strip()}")


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]
