"""The generated CRD in a real API server: the article's manifest, explain, rules, scale."""

import json
from pathlib import Path

import pytest

from spotpool.localworld.kube import Kube

pytestmark = pytest.mark.e2e

SAMPLE = (Path(__file__).parents[2] / "examples" / "article-sample.yaml").read_text()


def manifest(name: str, *edits: tuple[str, str]) -> str:
    text = SAMPLE.replace("name: spotpool-sample", f"name: {name}")
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    return text


def test_the_articles_manifest_applies_unchanged_and_gets_defaults(kube: Kube) -> None:
    kube.ok("apply", "-f", "-", stdin=SAMPLE)
    spec = json.loads(kube.ok("get", "spotpool", "spotpool-sample", "-o", "json"))["spec"]
    assert spec["minimum"] == spec["maximum"] == 2
    assert spec["deletionPolicy"] == "Delete" and "refreshInterval" not in spec
    assert "DESIRED" in kube.ok("get", "sp")


def test_kubectl_explain_reads_the_descriptions(kube: Kube) -> None:
    assert "Desired count" in kube.ok("explain", "spotpool.spec.replicas")
    assert "Delete the instances" in kube.ok("explain", "spotpool.spec.deletionPolicy")


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (("maximum: 2", "maximum: 1"), "minimum must be less than or equal to maximum"),
        (("SPOTPAID", "CHEAP"), 'Unsupported value: "CHEAP"'),
        (("  imageId: img-xxx\n", ""), "spec.imageId: Required value"),
        (("  secretKey: xxx\n", ""), "secretId and secretKey go together"),
        (("minimum: 2", "minimum: -1"), "spec.minimum"),
        (("sg-xxx", "default"), "spec.securityGroupIds[0]"),
        (
            ("  imageId: img-xxx\n", "  imageId: img-xxx\n  refreshInterval: 3s\n"),
            "refreshInterval must be at least 10s",
        ),
        (  # issue 46: spotpool-retained would put the pool's leaks beyond the sweep
            ("  imageId: img-xxx\n", "  imageId: img-xxx\n  tags: {spotpool-retained: 'x'}\n"),
            "tag keys starting with spotpool- are the operator's own",
        ),
    ],
)
def test_invalid_manifests_are_refused_with_a_clear_message(
    kube: Kube, edit: tuple[str, str], says: str
) -> None:
    refused = kube.run("apply", "-f", "-", stdin=manifest("invalid", edit))
    assert refused.returncode != 0
    assert says in refused.stderr


def test_scale_subresource_within_bounds(kube: Kube) -> None:
    kube.ok(
        "apply",
        "-f",
        "-",
        stdin=manifest("scalable", ("minimum: 2", "minimum: 1"), ("maximum: 2", "maximum: 4")),
    )
    kube.ok("scale", "spotpool/scalable", "--replicas=3")
    assert kube.ok("get", "spotpool", "scalable", "-o", "jsonpath={.spec.replicas}") == "3"
    beyond = kube.run("scale", "spotpool/scalable", "--replicas=9")
    assert beyond.returncode != 0 and "replicas must lie between" in beyond.stderr


def test_one_custom_subnet_for_two_zones_is_refused_a_subnet_per_zone_is_not(kube: Kube) -> None:
    zones = (
        "availabilityZone: ap-singapore-2",
        "availabilityZones: [ap-singapore-2, ap-singapore-3]",
    )
    vpc = ("vpcId: DEFAULT", "vpcId: vpc-gpu1")
    one_subnet = ("subnetId: DEFAULT", "subnetId: subnet-gpu2")
    refused = kube.run("apply", "-f", "-", stdin=manifest("one-subnet", zones, vpc, one_subnet))
    assert refused.returncode != 0
    assert "a subnet lives in one zone" in refused.stderr and "subnetIds" in refused.stderr
    no_vpc = ("subnetId: DEFAULT", "subnetIds: {ap-singapore-2: subnet-gpu2}")
    refused = kube.run("apply", "-f", "-", stdin=manifest("no-vpc", no_vpc))
    assert refused.returncode != 0 and "subnetIds needs the vpcId" in refused.stderr

    per_zone = (
        "subnetId: DEFAULT",
        "subnetIds: {ap-singapore-2: subnet-gpu2, ap-singapore-3: subnet-gpu3}\n"
        "  dataDisks: [{type: CLOUD_SSD, size: 200, deleteWithInstance: false}]\n"
        "  camRoleName: gpu-trainer\n  placementGroupId: ps-gpu1\n"
        "  imageIds: {GN7.2XLARGE32: img-cuda12}",
    )
    kube.ok("apply", "-f", "-", stdin=manifest("per-zone", zones, vpc, per_zone))
    spec = json.loads(kube.ok("get", "spotpool", "per-zone", "-o", "json"))["spec"]
    assert spec["subnetIds"]["ap-singapore-3"] == "subnet-gpu3"
    assert spec["dataDisks"] == [{"type": "CLOUD_SSD", "size": 200, "deleteWithInstance": False}]
    # One zone keeps working with its one subnetId.
    kube.ok("apply", "-f", "-", stdin=manifest("one-zone", vpc, one_subnet))
