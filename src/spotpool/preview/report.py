"""Render previews as markdown (a pull-request comment), plain text, or JSON."""

import json

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
            "changes": p.changes.model_dump() if p.changes else None,
            "error": p.error,
        }
        for p in previews
    ]
    return json.dumps({"pools": pools}, indent=2)


def _cells(p: PoolPreview) -> list[str]:
    if p.changes is None:
        return ["-", "-", "-", "-"]
    c = p.changes
    return [str(c.create), str(c.update), str(c.replace), str(c.delete)]


def to_markdown(previews: list[PoolPreview]) -> str:
    lines = [
        COMMENT_MARKER,
        "## Spotpool preview",
        "",
        "| pool | stack | creates | updates | replaces | deletes | |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for p in previews:
        state = "error" if p.error else ("changes" if has_changes([p]) else "no change")
        lines.append(
            f"| `{p.namespace}/{p.name}` | `{p.stack}` | {' | '.join(_cells(p))} | {state} |"
        )
    for p in previews:
        where = f" ({p.file})" if p.file else ""
        lines += ["", f"<details><summary><code>{p.namespace}/{p.name}</code>{where}</summary>", ""]
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
        create, update, replace, delete = _cells(p)
        lines.append(
            f"{head}: {create} to create, {update} to update, {replace} to replace, "
            f"{delete} to delete"
        )
    return "\n".join(lines) + "\n"
