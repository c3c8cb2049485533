"""Old operator images are removed after a build (each is ~1.1 GB): the newest few stay, the
one just built stays, and an image a container still runs is left. Real podman storage, with
tiny scratch images under a label of the test's own (the real builds' images are not touched)."""

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from spotpool.image.host import ensure_tools
from spotpool.image.prune import built_images, prune

pytestmark = pytest.mark.integration


@pytest.fixture
def label() -> Iterator[str]:
    ensure_tools(lambda line: None)  # buildah and podman, from Debian when missing
    label = f"io.spotpool.test.prune-{uuid.uuid4().hex[:8]}"
    yield label
    for image in built_images(label):
        subprocess.run(["podman", "rmi", "--force", image.id], capture_output=True)


def scratch_image(label: str, name: str, created: int) -> str:
    """A one-file image made at `created` (seconds since the epoch), tagged `name`."""
    container = subprocess.run(
        ["buildah", "from", "scratch"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        subprocess.run(["buildah", "config", "--label", f"{label}=1", container], check=True)
        subprocess.run(
            ["buildah", "commit", "-q", "--timestamp", str(created), container, name],
            capture_output=True,
            check=True,
        )
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True)
    return subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_all_but_the_newest_and_the_one_just_built_are_removed(label: str) -> None:
    ids = [
        scratch_image(
            label, f"localhost/spotpool-prune-test:{label[-8:]}-{age}", 1_700_000_000 + age
        )
        for age in range(5)
    ]  # ids[4] is the newest
    removed = prune(lambda line: None, keep=2, spare=ids[0], label=label)
    assert sorted(removed) == sorted(ids[1:3])
    assert {image.id for image in built_images(label)} == {ids[0], ids[3], ids[4]}


def test_an_image_a_container_uses_is_left_and_said_so(label: str) -> None:
    old = scratch_image(label, f"localhost/spotpool-prune-test:{label[-8:]}-old", 1_700_000_000)
    scratch_image(label, f"localhost/spotpool-prune-test:{label[-8:]}-new", 1_700_000_100)
    container = subprocess.run(
        ["podman", "create", old, "/nothing"], capture_output=True, text=True, check=True
    ).stdout.strip()
    said: list[str] = []
    try:
        assert prune(said.append, keep=1, label=label) == []
        assert old in {image.id for image in built_images(label)}
        assert said and old[:12] in said[0]
    finally:
        subprocess.run(["podman", "rm", "--force", container], capture_output=True)
