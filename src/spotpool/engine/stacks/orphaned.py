"""Stacks whose pool is gone: a stack of the backend with no Spotpool of its `<namespace>.<name>`
in the cluster. Its instances are held (the sweep never takes them: a pool applied again takes
the stack back), and no one converges or deletes them until a person does. Read from the
backend's files, without the CLI or the passphrase."""

from collections.abc import Collection

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.leftovers.holdings import backend_holdings
from spotpool.engine.state.backend_files import latest_deployment, open_backend
from spotpool.engine.state.stack_state import SLOT_TYPE


def orphaned(backend_url: str, live: Collection[str]) -> dict[str, list[str]] | None:
    """Stack name -> the instance ids it holds, for every stack not in `live` (stack names of
    the cluster's Spotpools); None when the backend cannot be read in full."""
    holdings = backend_holdings(backend_url)
    files = open_backend(backend_url)
    if holdings is None or holdings.doubt is not None or files is None:
        return None
    found: dict[str, list[str]] = {}
    for name in sorted(holdings.stacks - set(live)):
        if "." not in name:
            continue  # not a pool's stack
        state = latest_deployment(files, PROJECT, name) or {}
        found[name] = sorted(
            str(r["id"]) for r in state.get("resources") or []
            if r.get("type") == SLOT_TYPE and r.get("id")
        )  # fmt: skip
    return found
