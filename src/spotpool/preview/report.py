"""Render previews as markdown (a pull-request comment), plain text, or JSON.

The summary counts cloud instances, as reviewers think of a pool; the Pulumi resources (the
stack and the pool's component besides the instances) are in each pool's details."""

import json

from spotpool.api.status import Changes
from spotpool.preview.run import PoolPreview

# Marks the comment the workflow keeps up to date.
COMMENT_MARKER = "<!-- spotpool-preview -->"


def has_changes(previews: list[PoolPreview]) -> bool:
    return any(
        p.changes
        and (p.changes.create or p.changes.update or p.changes.replace or p.changes.delete)
        for p in previews
    )


def to_json(previews: list[PoolPreview]) -> str:
    pools = [
        {
            "file": p.file,
            "namespace": p.namespace,
            "name": p.name,
            "stack": p.stack,
            "instances": p.instances.model_dump() if p.instances else None,
            "changes": p.changes.model_dump() if p.changes else None,
            "error": p.error,
            "removed": p.removed,
            "batches": p.batches,
            "drift": [d.model_dump(mode="json", by_alias=True) for d in p.drift],
        }
        for p in previews
    ]
    return json.dumps({"pools": pools}, indent=2)


def _cells(changes: Changes | None) -> list[str]:
    if changes is None:
        return ["-", "-", "-", "-"]
    c = changes
    return [str(c.create), str(c.update), str(c.replace), str(c.delete)]


def _resources(changes: Changes) -> str:
    create, update, replace, delete = _cells(changes)
    return (
        f"Pulumi resources: {create} to create, {update} to update, {replace} to replace, "
        f"{delete} to delete, {changes.same} unchanged"
    )


def _batches(p: PoolPreview) -> str:
    """How spec.disruption rolls the replacements out."""
    slots = ", ".join(str(s) for s in p.replaced_slots)
    return f"Instances replaced in {p.batches} batch(es) (spec.disruption), slots {slots}"


def _drift_lines(p: PoolPreview) -> list[str]:
    """The drift the pool's last refresh found, as a table: each field as the stack sets it and
    as the cloud has it (an up of this change sets it back, whatever driftPolicy says)."""
    if not p.drift:
        return []
    lines = [
        "Drift at the last refresh (changed outside the operator; this change's up restores it):",
        "",
        "| slot | instance | field | stack sets | cloud has |",
        "|---:|---|---|---|---|",
    ]
    for d in p.drift:
        for f in d.fields:
            lines.append(
                f"| {d.slot} | `{d.instance_id}` | `{f.field}` | {_value(f.desired)} "
                f"| {_value(f.actual)} |"
            )
    return [*lines, ""]


def _value(value: str | None) -> str:
    return "-" if value is None else f"`{value}`"


def to_markdown(previews: list[PoolPreview]) -> str:
    lines = [
        COMMENT_MARKER,
        "## Spotpool preview",
        "",
        "| pool | stack | instances to create | to update | to replace | to delete | |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for p in previews:
        state = "error" if p.error else ("changes" if has_changes([p]) else "no change")
        state = f"removed, {state}" if p.removed else state
        lines.append(
            f"| `{p.namespace}/{p.name}` | `{p.stack}` | {' | '.join(_cells(p.instances))} "
            f"| {state} |"
        )
    for p in previews:
        where = f" ({p.file})" if p.file else ""
        lines += ["", f"<details><summary><code>{p.namespace}/{p.name}</code>{where}</summary>", ""]
        if p.changes is not None and not p.error:
            lines += [_resources(p.changes) + ":", ""]
        if p.batches and not p.error:
            lines += [_batches(p) + ".", ""]
        lines += _drift_lines(p)
        body = f"Error: {p.error}" if p.error else (p.diff.strip() or "no changes")
        lines += ["```diff" if not p.error else "```", body, "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def to_text(previews: list[PoolPreview]) -> str:
    lines = []
    for p in previews:
        head = f"{p.namespace}/{p.name} (stack {p.stack})"
        if p.error:
            lines.append(f"{head}: ERROR {p.error}")
            continue
        create, update, replace, delete = _cells(p.instances)
        lines.append(
            f"{head}: instances {create} to create, {update} to update, {replace} to replace, "
            f"{delete} to delete"
        )
        if p.changes is not None:
            lines.append(f"  {_resources(p.changes)}")
        if p.batches:
            lines.append(f"  {_batches(p)}")
        for d in p.drift:
            lines.append(f"  drift at the last refresh: {d.describe()}")
    return "\n".join(lines) + "\n"
