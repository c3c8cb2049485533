"""Run the previews: one per manifest, or one per existing pool stack (blast radius of a change
to the stack program). A failure is reported for its pool; the others still run."""

from pulumi import automation as auto
from pydantic import BaseModel

from spotpool.api.drift import InstanceDrift
from spotpool.api.spec import DeletionPolicy
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import Changes
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.stacks import inventory
from spotpool.engine.stacks.disruption import batch_count
from spotpool.engine.stacks.stack import EngineError, PoolStack
from spotpool.engine.tencent.credentials import Credentials
from spotpool.preview.manifests import Manifest

# A pool with no stack yet has no uid; its preview is all-create whatever the uid is.
NEW_POOL_UID = "00000000-0000-0000-0000-000000000000"


class PoolPreview(BaseModel):
    file: str | None = None
    namespace: str
    name: str
    stack: str
    changes: Changes | None = None  # Pulumi resources (the stack and its component too)
    instances: Changes | None = None  # cloud instances: what a reviewer counts
    diff: str = ""
    error: str | None = None
    removed: bool = False  # the change deletes the manifest
    replaced_slots: list[int] = []  # slots whose instance the change replaces
    batches: int | None = None  # how many batches spec.disruption rolls them out in
    drift: list[InstanceDrift] = []  # instances the last refresh found changed by hand


def preview_manifests(
    manifests: list[Manifest], settings: EngineSettings, credentials: Credentials
) -> list[PoolPreview]:
    existing = set(inventory.stack_names(settings))
    results = []
    for manifest in manifests:
        stack_name = f"{manifest.namespace}.{manifest.name}"
        entry = PoolPreview(
            file=manifest.file, namespace=manifest.namespace, name=manifest.name, stack=stack_name
        )
        if manifest.spec is None:
            entry.error = manifest.error
        else:
            uid, notice_url, applied = NEW_POOL_UID, None, None
            if stack_name in existing:
                view = inventory.view(settings, stack_name)
                uid, applied = view.uid or NEW_POOL_UID, view.config
                entry.drift = view.drift
                # The notice endpoint is the operator's setting, not the manifest's: keep the
                # one the stack applied, or every instance would show as replaced.
                agent = applied.notice_agent if applied else None
                notice_url = agent.url if agent else None
            pool = PoolIdentity(namespace=manifest.namespace, name=manifest.name, uid=uid)
            config = StackConfig.from_spec(pool, manifest.spec, notice_url)
            stack = PoolStack(pool, settings, credentials, config.region)
            _run(entry, stack, config, kept_secrets(applied, config))
            bounds = manifest.spec.disruption
            entry.batches = batch_count(
                entry.replaced_slots, bounds.max_unavailable, bounds.max_surge,
                manifest.do_not_disrupt,
            )  # fmt: skip
        results.append(entry)
    return results


def preview_stacks(settings: EngineSettings, credentials: Credentials) -> list[PoolPreview]:
    """Every pool's stack with its own last config and the working tree's stack program."""
    results = []
    for name in inventory.stack_names(settings):
        namespace, pool_name = name.split(".", 1)
        entry = PoolPreview(namespace=namespace, name=pool_name, stack=name)
        try:
            current = inventory.view(settings, name)
        except auto.CommandError as err:
            entry.error = f"cannot read the stack: {str(err).strip()[-300:]}"
            results.append(entry)
            continue
        if current.config is None:
            entry.error = "the stack exports no config (never converged by this version)"
        else:
            config, entry.drift = current.config, current.drift
            stack = PoolStack(config.pool, settings, credentials, config.region)
            _run(entry, stack, config, kept_secrets(config, config))
        results.append(entry)
    return results


def kept_secrets(applied: StackConfig | None, config: StackConfig) -> list[str]:
    """The instances' secret inputs the preview leaves as the state holds them. A preview never
    holds a login password (it lives in the cluster's Secret), and the preview backend holds
    placeholders for every secret (preview/redact.py): the user data is previewed as changed
    only when its fingerprint (or the notice agent rendered into it) changed."""
    if applied is None:
        return []  # a new pool: everything is created from this run's inputs
    kept = ["password"]
    if (
        applied.redacted().user_data == config.redacted().user_data
        and applied.notice_agent == config.notice_agent
    ):
        kept.append("userDataRaw")
    return kept


def preview_removed(removed: list[Manifest], settings: EngineSettings) -> list[PoolPreview]:
    """Manifests a change deletes: the pool's stack is destroyed (deletionPolicy Delete: every
    instance in its state terminated) or forgotten (Retain: the instances keep running)."""
    existing = set(inventory.stack_names(settings))
    results = []
    for manifest in removed:
        stack_name = f"{manifest.namespace}.{manifest.name}"
        entry = PoolPreview(
            file=manifest.file, namespace=manifest.namespace, name=manifest.name,
            stack=stack_name, removed=True,
        )  # fmt: skip
        if stack_name not in existing:
            entry.diff = "removed: the pool has no stack (nothing to delete)"
            entry.changes = entry.instances = Changes()
        else:
            held = len(inventory.view(settings, stack_name).instances)
            retain = manifest.spec is not None and (
                manifest.spec.deletion_policy == DeletionPolicy.RETAIN
            )
            entry.instances = Changes(same=held) if retain else Changes(delete=held)
            entry.changes = Changes(delete=0 if retain else held)
            entry.diff = (
                f"removed: deletionPolicy Retain — the stack is forgotten, its {held} "
                "instance(s) keep running"
                if retain
                else f"removed: the stack is destroyed — {held} instance(s) terminated"
            )
        results.append(entry)
    return results


def _run(
    entry: PoolPreview, stack: PoolStack, config: StackConfig, kept: list[str] | None = None
) -> None:
    try:
        result = stack.preview(config, keep_secret_inputs=kept or [])
    except EngineError as err:
        entry.error = str(err)
        return
    entry.changes = result.changes
    entry.instances = result.instance_changes
    entry.replaced_slots = result.replaced_slots
    entry.diff = result.diff
