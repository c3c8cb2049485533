"""The spec model: the article's manifest, defaults, the desired count and the rules."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from spotpool.api.crd import ACCESS_CRD_PATH, CRD_PATH, render_access_yaml, render_yaml
from spotpool.api.spec import SpotpoolSpec, parse_duration
from tests._support.specs import article_spec, refusal

pytestmark = pytest.mark.unit

SAMPLE = Path(__file__).parents[1] / "examples" / "article-sample.yaml"
ROOT = Path(__file__).parents[1]


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
        ({"tags": {"spotpool-retained": "2026-12-06"}}, "tag keys starting with spotpool-"),
        ({"tags": {"team": "a", "spotpool-pool-uid": "x"}}, "tag keys starting with spotpool-"),
    ],
)
def test_invalid_specs_are_refused_naming_what_to_fix(
    changes: dict[str, object], says: str
) -> None:
    assert says in refusal(**changes)


def test_reserved_tag_keys_are_refused_by_the_model_and_the_crd_alike() -> None:
    """Issue 46: `spotpool-retained` in spec.tags put the pool's leaks beyond the sweep."""
    kept = SpotpoolSpec.model_validate(article_spec(tags={"team": "a", "pool-spotpool-x": "1"}))
    assert kept.tags == {"team": "a", "pool-spotpool-x": "1"}
    crd = yaml.safe_load(render_yaml())
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ]
    (rule,) = [r for r in rules if "self.tags" in r["rule"]]
    assert rule["rule"] == "!has(self.tags) || self.tags.all(k, !k.startsWith('spotpool-'))"


def test_durations() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("")


def test_committed_crd_matches_the_model() -> None:
    committed = (ROOT / CRD_PATH).read_text()
    assert committed == render_yaml(), "the CRD drifted: run `spotpool crd generate`"


def test_committed_access_policy_crd_matches_the_model() -> None:
    committed = (ROOT / ACCESS_CRD_PATH).read_text()
    assert committed == render_access_yaml(), "the CRD drifted: run `spotpool crd generate`"


def test_a_launch_spec_with_subnets_per_zone_disks_role_group_and_images() -> None:
    spec = SpotpoolSpec.model_validate(
        article_spec(
            availabilityZone=None,
            availabilityZones=["ap-singapore-2", "ap-singapore-3"],
            subnetId="DEFAULT",
            vpcId="vpc-abc1",
            subnetIds={"ap-singapore-2": "subnet-aaa2", "ap-singapore-3": "subnet-aaa3"},
            dataDisks=[{"type": "CLOUD_SSD", "size": 200, "deleteWithInstance": False}],
            camRoleName="gpu-trainer",
            placementGroupId="ps-abc1",
            imageIds={"GN7.2XLARGE32": "img-cuda12"},
        )
    )
    assert spec.subnet_ids == {"ap-singapore-2": "subnet-aaa2", "ap-singapore-3": "subnet-aaa3"}
    (disk,) = spec.data_disks or []
    assert (disk.type, disk.size, disk.delete_with_instance) == ("CLOUD_SSD", 200, False)
    defaults = SpotpoolSpec.model_validate(article_spec(dataDisks=[{"size": 50}]))
    (default,) = defaults.data_disks or []
    assert (default.type, default.delete_with_instance) == ("CLOUD_BSSD", True)
    # One zone keeps its single custom subnetId.
    one = SpotpoolSpec.model_validate(article_spec(subnetId="subnet-one1", vpcId="vpc-abc1"))
    assert one.subnet_id == "subnet-one1"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (
            {"availabilityZones": ["ap-singapore-2", "ap-singapore-3"], "subnetId": "subnet-a1"},
            "with more than one zone set subnetIds",
        ),
        ({"subnetIds": {"ap-singapore-2": "subnet-a1"}}, "subnetIds needs the vpcId"),
        ({"subnetIds": {"ap-singapore-2": "default"}, "vpcId": "vpc-a1"}, "subnetIds"),
        ({"placementGroupId": "pg-1"}, "placementGroupId"),
        ({"imageIds": {"GN7.2XLARGE32": "ami-1"}}, "imageIds"),
        ({"dataDisks": [{"size": 5}]}, "dataDisks"),
        ({"camRoleName": "no spaces"}, "camRoleName"),
    ],
)
def test_launch_spec_mistakes_are_refused(changes: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SpotpoolSpec.model_validate(article_spec(**changes))
    assert says in str(refused.value)
