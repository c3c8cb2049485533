"""Old operator images out of local storage: every build of new inputs leaves a ~0.5 GB image
behind (a fresh clone, a new commit), so after a build only the newest few are kept."""

import json
import subprocess
from dataclasses import dataclass

from spotpool.image.context import INPUTS_LABEL
from spotpool.image.host import Say

KEEP = 3  # the newest builds kept: a rebuild of a recent commit still finds its image


@dataclass(frozen=True)
class Built:
    id: str
    created: int  # seconds since the epoch
    names: tuple[str, ...]  # its tags: removing them all removes it (an id with tags needs force)


def built_images(label: str = INPUTS_LABEL) -> list[Built]:
    """The images `spotpool image build` made (they carry the inputs label), newest first."""
    done = subprocess.run(
        ["podman", "images", "--format", "json", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return []
    listed = {
        item["Id"]: Built(item["Id"], int(item.get("Created", 0)), tuple(item.get("Names") or []))
        for item in json.loads(done.stdout or "[]")
    }
    # Unnamed ones are a build's intermediate layers (they carry its labels too): they go with
    # the last image built on them.
    named = [built for built in listed.values() if built.names]
    return sorted(named, key=lambda built: -built.created)


def prune(
    say: Say, keep: int = KEEP, spare: str | None = None, label: str = INPUTS_LABEL
) -> list[str]:
    """Remove all but the `keep` newest built images (never `spare`, the one just built or
    reused); an image a container still uses is left and said so. Returns the removed ids."""
    removed = []
    for old in [image for image in built_images(label)[keep:] if image.id != spare]:
        # Never --force: that would also remove the containers still running it.
        done = subprocess.run(
            ["podman", "rmi", *(old.names or [old.id])], capture_output=True, text=True
        )
        if done.returncode == 0:
            removed.append(old.id)
        else:
            say(f"old image {old.id[:12]} left: {done.stderr.strip()[-200:]}")
    if removed:
        # The removed builds' layers no image uses any more (podman keeps a tagged image's
        # parents: a kept build's cached layers stay).
        subprocess.run(["podman", "image", "prune", "--force"], capture_output=True)
        say(f"removed {len(removed)} old image(s); kept the newest {keep}")
    return removed
