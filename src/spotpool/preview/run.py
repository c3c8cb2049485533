"""Run the previews: one per manifest, or one per existing pool stack (blast radius of a change
to the stack program). A failure is reported for its pool; the others still run."""

from pulumi import automation as auto
from pydantic import BaseModel

from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import Changes
from spotpool.engine import inventory
from spotpool.engine.credentials import Credentials
from spotpool.engine.settings import EngineSettings
from spotpool.engine.stack import EngineError, PoolStack
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
            uid, notice_url = NEW_POOL_UID, None
            if stack_name in existing:
                view = inventory.view(settings, stack_name)
                uid = view.uid or NEW_POOL_UID
                # The notice endpoint is the operator's setting, not the manifest's: keep the
                # one the stack applied, or every instance would show as replaced.
                agent = view.config.notice_agent if view.config else None
                notice_url = agent.url if agent else None
            pool = PoolIdentity(namespace=manifest.namespace, name=manifest.name, uid=uid)
            config = StackConfig.from_spec(pool, manifest.spec, notice_url)
            _run(entry, PoolStack(pool, settings, credentials, config.region), config)
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
            config = current.config
            stack = PoolStack(config.pool, settings, credentials, config.region)
            _run(entry, stack, config)
        results.append(entry)
    return results


def _run(entry: PoolPreview, stack: PoolStack, config: StackConfig) -> None:
    try:
        result = stack.preview(config)
    except EngineError as err:
        entry.error = str(err)
        return
    entry.changes = result.changes
    entry.instances = result.instance_changes
    entry.diff = result.diff
