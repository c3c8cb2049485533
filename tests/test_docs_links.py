"""The README and docs/ hold together: every relative link reaches a file (and a heading, when
it names one), the README's two commands are the Makefile's, and the article the project
started from is named and linked wherever a page cites it."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
ARTICLE_URL = (
    "https://www.besthub.dev/articles/"
    "how-to-build-a-gpu-spot-pool-operator-on-kubernetes-with-kubebuilder-8527af485efd"
)
ARTICLE_TITLE = "How to Build a GPU Spot-Pool Operator on Kubernetes with Kubebuilder"

FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
INLINE_LINK = re.compile(r"\]\(([^)\s]+)\)")
REFERENCE = re.compile(r"^\[([^\]]+)\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.M)


def _prose(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(_prose(page))}


def _targets(page: Path) -> list[str]:
    text = _prose(page)
    found = INLINE_LINK.findall(text) + [url for _, url in REFERENCE.findall(text)]
    return [t for t in found if not re.match(r"[a-z]+:", t)]  # not http:, https:, mailto:


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in _targets(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no such heading in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    readme = _prose(ROOT / "README.md")
    missing = [
        p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in readme
    ]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_the_readmes_two_commands_are_the_makefiles() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(make demo[^\n]*\nmake test[^\n]*)\n```", readme)
    assert block, "the README shows `make demo` and `make test` together in one block"
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert {"demo", "test"} <= targets
    assert "exec make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_article_is_named_and_linked_where_cited(page: Path) -> None:
    text = _prose(page)
    if not re.search(r"\bthe article\b", text, re.I):
        return
    links = INLINE_LINK.findall(text) + [url for _, url in REFERENCE.findall(text)]
    assert ARTICLE_URL in links, f"{page.name} cites the article without linking it"
    assert ARTICLE_TITLE in " ".join(text.split()), (
        f"{page.name} cites the article without naming it ({ARTICLE_TITLE})"
    )


def test_the_slugs_are_githubs() -> None:
    assert _slug("Bounded voluntary disruption: `spec.disruption`") == (
        "bounded-voluntary-disruption-specdisruption"
    )
    assert _slug("RequestLimitExceeded (throttling)") == "requestlimitexceeded-throttling"
