"""The spec model: the article's manifest, defaults, the desired count and the rules."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from spotpool.api.crd import CRD_PATH, render_yaml
from spotpool.api.spec import SpotpoolSpec, parse_duration

SAMPLE = Path(__file__).parents[1] / "examples" / "article-sample.yaml"
ROOT = Path(__file__).parents[1]


def article_spec(**changes: object) -> dict[str, object]:
    spec: dict[str, object] = yaml.safe_load(SAMPLE.read_text())["spec"]
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def test_the_articles_manifest_parses_with_its_meaning() -> None:
    spec = SpotpoolSpec.model_validate(article_spec())
    assert spec.region == "ap-singapore"
    assert spec.zones() == ["ap-singapore-2"]
    assert spec.types() == ["GN7.2XLARGE32"]
    assert spec.desired_count() == 2
    assert spec.instance_charge_type == "SPOTPAID"
    assert spec.uses_inline_credentials()
    assert spec.system_disk.size == 100 and spec.system_disk.type == "CLOUD_BSSD"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"minimum": 1, "maximum": 4}, 1),
        ({"minimum": 1, "maximum": 4, "replicas": 3}, 3),
        ({"minimum": 0, "maximum": 4, "replicas": 0}, 0),
    ],
)
def test_desired_count_is_replicas_else_minimum(changes: dict[str, int], expected: int) -> None:
    assert SpotpoolSpec.model_validate(article_spec(**changes)).desired_count() == expected


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"minimum": 3, "maximum": 2}, "minimum must be less than or equal to maximum"),
        ({"replicas": 7}, "replicas must lie between minimum and maximum"),
        ({"instanceChargeType": "CHEAP"}, "instanceChargeType"),
        ({"imageId": None}, "imageId"),
        ({"secretKey": None}, "secretId and secretKey go together"),
        ({"secretId": None, "secretKey": None}, "set credentialsSecretRef"),
        ({"availabilityZone": None}, "set availabilityZone or availabilityZones"),
        ({"refreshInterval": "soon"}, "refreshInterval"),
        ({"refreshInterval": "5s"}, "refreshInterval must be at least 10s"),
        ({"maximum": 5000}, "maximum"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_invalid_specs_are_refused_naming_what_to_fix(
    changes: dict[str, object], says: str
) -> None:
    spec = article_spec(**changes)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
    with pytest.raises(ValidationError) as refused:
        SpotpoolSpec.model_validate(spec)
    assert says in str(refused.value)


def test_durations() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("")


def test_committed_crd_matches_the_model() -> None:
    committed = (ROOT / CRD_PATH).read_text()
    assert committed == render_yaml(), "the CRD drifted: run `spotpool crd generate`"
