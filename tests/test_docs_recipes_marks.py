"""The docs test's reading of the pages (tests/e2e/test_docs_recipes.py runs them): every page
it runs has recipes, every `$ command` an output block shows is one a recipe runs, and what
differs from run to run (ids, times, ages) is what a comparison leaves out, nothing more."""

from pathlib import Path

import pytest

from tests._support.docs_recipes import (
    PAGES,
    ROOT,
    bare,
    blocks,
    commands,
    expectations,
    expected_exit,
    missing,
)

pytestmark = pytest.mark.unit


def test_every_page_has_recipes_and_shows_only_commands_it_runs() -> None:
    run: list[str] = []
    for page in PAGES:
        found = blocks(ROOT / page, ROOT)
        assert any(block.kind == "run" for block in found), f"{page} has no recipe to run"
        for block in found:
            if block.kind.startswith("output"):
                for command, lines in expectations(block):
                    assert command in run, f"{block.where}: `{command}` is run by no recipe"
                    assert any(line.strip() for line in lines), f"{block.where}: nothing shown"
            else:
                run += [bare(command) for command in commands(block.text)]
    assert any(b.kind == "teardown" for b in blocks(ROOT / "README.md", ROOT))


def test_commands_are_read_as_a_shell_reads_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- docs-test: run -->\n```sh\n# a comment\nexport A=1\n"
        "spotpool x --a 1 \\\n    --b 2   # exits 2: changes\n"
        "cat > f <<'EOF'\n{\"k\": 1}\nEOF\n```\n\n```sh\nnot marked\n```\n"
    )
    [block] = blocks(page, tmp_path)
    assert block.where == "page.md:4"
    found = commands(block.text)
    assert found == [
        "export A=1",
        "spotpool x --a 1 --b 2   # exits 2: changes",
        "cat > f <<'EOF'\n{\"k\": 1}\nEOF",
    ]
    assert [expected_exit(c) for c in found] == [0, 2, 0]
    assert bare(found[1]) == "spotpool x --a 1 --b 2"


def test_what_differs_between_runs_is_left_out_and_nothing_else() -> None:
    printed = (
        "gpu-pool   3   3   Ready   Converged   0   14s   1.332   up   succeeded\n"
        "15s   Warning   Reclaimed   spotpool/gpu-pool   the cloud reclaimed 1 instance(s): "
        "slot 2 (ins-3rijih0g); replacing\n"
        '  - lastTransitionTime: "2026-11-28T08:05:35Z"\n'
        "default.gpu-pool  45 seconds ago  6"
    )
    shown = [
        "gpu-pool   3         3       Ready   Converged   0   2m1s   1.332   up   succeeded",
        "1s  Warning  Reclaimed  spotpool/gpu-pool  the cloud reclaimed 1 instance(s): "
        "slot 0 (ins-00000000); replacing",
        '  - lastTransitionTime: "2026-11-27T01:02:03Z"',
        "default.gpu-pool  2 minutes ago  6",
        "…",
    ]
    assert missing(shown, printed) == []
    assert missing(["gpu-pool 3 2 Ready …"], printed) == ["gpu-pool 3 2 Ready …"]
    assert missing(["… Converged …", "gpu-pool …"], printed, in_order=True) == ["gpu-pool …"]
