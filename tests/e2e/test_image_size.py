"""The operator image within its size budget (src/spotpool/image/build.py SIZE_BUDGET, as
`podman image inspect` counts it): a change that grows the image past it fails the test
command. The image is the one `make test` built (found by its inputs), or built here."""

from pathlib import Path

import pytest

from spotpool.image.build import SIZE_BUDGET, build, image_size

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]


def test_the_image_is_within_its_size_budget() -> None:
    image = build(ROOT, print)
    size = image_size(image.reference)
    assert 0 < size <= SIZE_BUDGET, (
        f"{image.reference} is {size / 1e6:.0f} MB, past its budget of {SIZE_BUDGET / 1e6:.0f} MB "
        '(docs/deploy.md, "Size"): leave out what the operator does not run'
    )
