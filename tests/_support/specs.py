"""Spotpool specs the unit tests start from: the article's sample (examples/), changed."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from spotpool.api.spec import SpotpoolSpec

SAMPLE = Path(__file__).parents[2] / "examples" / "article-sample.yaml"


def article_spec(**changes: object) -> dict[str, object]:
    """The article sample's spec with `changes` (a None value removes the field)."""
    spec: dict[str, object] = yaml.safe_load(SAMPLE.read_text())["spec"]
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def refusal(**changes: object) -> str:
    """What validating the article sample's spec with `changes` says; it must be refused."""
    with pytest.raises(ValidationError) as refused:
        SpotpoolSpec.model_validate(article_spec(**changes))
    return str(refused.value)
