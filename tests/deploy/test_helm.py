"""The chart as its users read and patch it (the real helm, no cluster): values documented
beside their defaults and checked by the schema, names and labels as in the charts platform
teams already use, the values that patch the pod, and the chart as a subchart."""

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from spotpool_deploy import chart

from spotpool.api import crd
from tests.conftest import require_tool
from tests.deploy.rendered import (
    PARENT_VALUES,
    by_identity,
    container,
    deployment,
    env,
    objects,
    parent_chart,
    pod,
    refusal,
)

pytestmark = pytest.mark.unit

VALUES = chart.CHART / "values.yaml"


def _leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the values' leaves (a map that is a value of its own: its path)."""
    found = set()
    for key, value in values.items():
        if isinstance(value, dict) and value and key not in MAP_VALUES:
            found |= _leaves(value, f"{prefix}{key}.")
        else:
            found.add(f"{prefix}{key}")
    return found


# Values that are a map as a whole (Kubernetes fields, labels), not a group of values.
MAP_VALUES = {"resources", "podSecurityContext", "securityContext", "dashboardLabels"}


def _keys_outside_map_values(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, key) of every key of values.yaml, less those inside a value that is a map
    as a whole (resources.requests.cpu …): those are Kubernetes' fields, documented there."""
    found, inside = [], None  # the indentation of the map value being skipped
    for at, line in enumerate(lines):
        key = re.match(r"^(\s*)([A-Za-z]\w*):", line)
        if key is None:
            continue
        indent = len(key[1])
        if inside is not None and indent > inside:
            continue
        inside = indent if key[2] in MAP_VALUES else None
        found.append((at, key[2]))
    return found


def test_every_value_is_documented_beside_it_and_known_to_the_schema() -> None:
    lines = VALUES.read_text().splitlines()
    for at, key in _keys_outside_map_values(lines):
        assert lines[at - 1].strip().startswith("#"), f"values.yaml: {key} has no comment above"
    values = yaml.safe_load(VALUES.read_text())
    schema = json.loads((chart.CHART / "values.schema.json").read_text())

    def known(properties: dict[str, Any], path: list[str]) -> bool:
        entry = properties.get(path[0])
        if entry is None:
            return False
        return len(path) == 1 or "properties" not in entry or known(entry["properties"], path[1:])

    for path in _leaves(values):
        assert known(schema["properties"], path.split(".")), f"{path} is not in the schema"
    assert set(schema["properties"]) == set(values) | {"enabled"}  # a parent's condition


def test_the_crd_is_in_crds_generated_from_the_spec_model_and_never_templated() -> None:
    for path, render in crd.GENERATED.items():
        assert (chart.CHART / path).read_text() == render(), (
            "spotpool crd generate --output operator/deploy/helm/spotpool/" + crd.CRD_PATH
        )
    templates = "".join(p.read_text() for p in (chart.CHART / "templates").iterdir())
    assert "CustomResourceDefinition" not in templates
    assert "helm show crds" in (chart.CHART / "templates" / "NOTES.txt").read_text()


def test_every_object_carries_the_charts_labels_and_common_labels() -> None:
    found = objects({"commonLabels": {"team": "platform", "app.kubernetes.io/name": "other"},
                     "podLabels": {"tier": "ops"}})  # fmt: skip
    for obj in found:
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "spotpool-0.1.0", chart.identity(obj)
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["team"] == "platform"
        assert labels["app.kubernetes.io/name"] == "spotpool-operator"  # never replaced
    pod_labels = deployment(found)["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == {
        "app.kubernetes.io/name": "spotpool-operator",
        "app.kubernetes.io/instance": "spotpool-operator",
        "app.kubernetes.io/part-of": "spotpool",
        "app.kubernetes.io/version": "0.1.0",
        "team": "platform",
        "tier": "ops",
    }  # fmt: skip  no chart version: a new chart alone does not roll the pods


def test_names_follow_name_and_fullname_overrides_never_the_release() -> None:
    default = by_identity(objects())
    assert "Deployment/spotpool-system/spotpool-operator" in default
    renamed = by_identity(objects({"nameOverride": "gpu-operator"}))
    selector = renamed["Deployment/spotpool-system/gpu-operator"]["spec"]["selector"]
    assert selector["matchLabels"] == {
        "app.kubernetes.io/name": "gpu-operator", "app.kubernetes.io/instance": "gpu-operator"
    }  # fmt: skip
    full = by_identity(objects({"fullnameOverride": "pools", "watchNamespaces": ["team-a"]}))
    assert sorted(full) == sorted(
        [
            "ServiceAccount/spotpool-system/pools", "Deployment/spotpool-system/pools",
            "PodDisruptionBudget/spotpool-system/pools", "NetworkPolicy/spotpool-system/pools",
            "PersistentVolumeClaim/spotpool-system/pools-state",
            "Service/spotpool-system/pools-metrics", "ConfigMap/spotpool-system/pools-dashboard",
            "ClusterRole/pools-spotpool-system-scan",
            "ClusterRoleBinding/pools-spotpool-system-scan",
            "ClusterRole/pools-spotpool-system-nodes",
            "ClusterRoleBinding/pools-spotpool-system-nodes",
            "Role/spotpool-system/pools-lease", "RoleBinding/spotpool-system/pools-lease",
            "Role/team-a/pools", "RoleBinding/team-a/pools",
            "ValidatingAdmissionPolicy/pools-spotpool-system-access",
            "ValidatingAdmissionPolicyBinding/pools-spotpool-system-access",
        ]
    )  # fmt: skip
    labels = full["Deployment/spotpool-system/pools"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "spotpool-operator"
    assert labels["app.kubernetes.io/instance"] == "pools"
    assert "fullnameOverride" in refusal({"fullnameOverride": "Bad_Name"})


def test_an_existing_service_account_is_used_and_bound_when_the_chart_makes_none() -> None:
    found = by_identity(objects({"serviceAccount": {"create": False, "name": "platform-ops"}}))
    assert not [key for key in found if key.startswith("ServiceAccount/")]
    assert pod(list(found.values()))["serviceAccountName"] == "platform-ops"
    for key, obj in found.items():
        if key.startswith(("ClusterRoleBinding/", "RoleBinding/")):
            assert obj["subjects"] == [
                {"kind": "ServiceAccount", "name": "platform-ops", "namespace": "spotpool-system"}
            ], key
    named = by_identity(objects({"serviceAccount": {"name": "ops", "annotations": {"a": "b"}}}))
    assert named["ServiceAccount/spotpool-system/ops"]["metadata"]["annotations"] == {"a": "b"}


def test_the_image_is_registry_repository_and_tag_or_digest() -> None:
    assert container(objects())["image"] == "spotpool-operator:0.1.0"  # appVersion
    shared = {"global": {"imageRegistry": "reg.example", "imagePullSecrets": [{"name": "g"}]}}
    assert container(objects(shared))["image"] == "reg.example/spotpool-operator:0.1.0"
    own = objects(
        {**shared, "image": {"registry": "ccr.example", "repository": "ops/sp", "tag": "2",
                             "pullPolicy": "Always"}, "imagePullSecrets": [{"name": "mine"}]}
    )  # fmt: skip
    assert container(own)["image"] == "ccr.example/ops/sp:2"
    assert container(own)["imagePullPolicy"] == "Always"
    assert pod(own)["imagePullSecrets"] == [{"name": "mine"}, {"name": "g"}]
    digest = "sha256:" + "ab" * 32
    pinned = objects({"image": {"repository": "r.example/sp", "tag": "2", "digest": digest}})
    assert container(pinned)["image"] == f"r.example/sp@{digest}"
    assert "/image/digest" in refusal({"image": {"digest": "latest"}})


def test_the_security_contexts_are_values_and_openshift_may_drop_the_uid() -> None:
    """OpenShift's restricted SCC assigns the uid and group itself: a values override that
    drops them leaves a pod that still runs as non-root on a read-only root filesystem."""
    openshift = {"podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None}}
    found = objects(openshift)
    assert pod(found)["securityContext"] == {
        "runAsNonRoot": True, "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert container(found)["securityContext"]["readOnlyRootFilesystem"] is True
    tightened = objects({"securityContext": {"runAsUser": 20000}})
    assert container(tightened)["securityContext"]["runAsUser"] == 20000
    assert container(tightened)["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_extra_volumes_the_budget_and_scheduling_are_values() -> None:
    found = objects(
        {"extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}],
         "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
         "podDisruptionBudget": {"enabled": False},
         "nodeSelector": {"node-role.kubernetes.io/ops": ""},
         "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
         "priorityClassName": "system-cluster-critical", "podAnnotations": {"multi": "a: b"}}
    )  # fmt: skip
    assert pod(found)["volumes"][-1] == {"name": "ca", "configMap": {"name": "corp-ca"}}
    assert container(found)["volumeMounts"][-1]["mountPath"] == "/etc/ssl/corp"
    mounts = [m["mountPath"] for m in container(found)["volumeMounts"]]
    assert mounts[:4] == ["/etc/spotpool/passphrase", "/var/lib/spotpool/work",
                          "/var/lib/spotpool/pulumi", "/tmp"]  # fmt: skip
    assert "PodDisruptionBudget" not in {o["kind"] for o in found}
    assert pod(found)["nodeSelector"] == {"node-role.kubernetes.io/ops": ""}
    assert pod(found)["tolerations"][0]["key"] == "ops"
    assert pod(found)["priorityClassName"] == "system-cluster-critical"
    assert deployment(found)["spec"]["template"]["metadata"]["annotations"] == {"multi": "a: b"}
    assert env(found)["SPOTPOOL_BACKEND_URL"].startswith("file://")


INVALID: dict[str, dict[str, Any]] = {
    "fullnameOverride": {"fullnameOverride": "Bad_Name"},
    "watchNamespaces/0": {"watchNamespaces": ["Team-A"]},
    "watchNamespaces": {"watchNamespaces": ["a", "a"]},
    "refreshInterval": {"refreshInterval": "1 minute"},
    "scrapeInterval": {"monitoring": {"scrapeInterval": "often"}},
    "dashboardNamespace": {"monitoring": {"dashboardNamespace": "Grafana"}},
    "maxConcurrent": {"maxConcurrent": 0},
    "backendUrl": {"replicas": 2},
    "backendUrl ": {"replicas": 2, "backendUrl": "file:///state"},
    "service": {"monitoring": {"serviceMonitor": True}, "metrics": {"service": False}},
    "imge": {"imge": "x"},
    "avoidFor": {"avoidFor": "3 minutes"},
    "leaseDuration": {"leaseDuration": "30"},
    "apiLimits": {"apiLimits": "RunInstances"},
    "probeBudget": {"probeBudget": -1},
    "fullRefreshEvery": {"fullRefreshEvery": -1},
    "pullPolicy": {"image": {"pullPolicy": "Sometimes"}},
    "for": {"prometheusRule": {"alerts": {"stackLocked": {"for": "soon"}}}},
}


@pytest.mark.parametrize("field", list(INVALID))
def test_the_chart_refuses_bad_values_and_names_them(field: str) -> None:
    assert field.strip() in refusal(INVALID[field])


def test_helm_lint_passes_and_bad_values_fail_with_the_value_named() -> None:
    binary = str(require_tool("helm"))
    lint = subprocess.run(
        [binary, "lint", "--strict", str(chart.CHART)], capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    bad = subprocess.run(
        [binary, "lint", str(chart.CHART), "--set", "watchNamespaces={Team_A}", "--set", "imge=x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "/watchNamespaces/0" in bad.stdout and "imge" in bad.stdout, bad.stdout


def test_the_chart_works_as_a_subchart_with_global_values(tmp_path: Path) -> None:
    binary = str(require_tool("helm"))
    parent = parent_chart(tmp_path)
    lint = subprocess.run(
        [binary, "lint", "--strict", str(parent)], capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run(
        [binary, "template", "platform", str(parent), "--namespace", "ops", "--include-crds"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    found = chart.objects(out.stdout)
    assert [o["kind"] for o in found].count("CustomResourceDefinition") == 2  # from crds/
    templated = by_identity([o for o in found if o["kind"] != "CustomResourceDefinition"])
    alone = by_identity(
        objects({**PARENT_VALUES["spotpool"], "global": PARENT_VALUES["global"]}, "ops")
    )
    assert templated == alone
    spec = templated["Deployment/ops/spotpool-operator"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "reg.example/spotpool-operator:0.1.0"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]

    off = subprocess.run(
        [binary, "template", "platform", str(parent), "--set", "spotpool.enabled=false"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert off.returncode == 0 and "kind:" not in off.stdout, off.stderr
