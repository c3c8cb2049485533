"""The install's objects: least-privilege RBAC, a locked-down Deployment, config checks."""

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic import ValidationError
from spotpool_deploy import workload
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import Object, identity, render
from spotpool_operator.cli import app as operator_app
from spotpool_operator.settings import OperatorSettings

from spotpool.api import crd

ROOT = Path(__file__).resolve().parents[2]
POOL_RULES = [
    {"apiGroups": ["devops.jokerbai.com"], "resources": ["spotpools"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["devops.jokerbai.com"], "resources": ["spotpools/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
]  # fmt: skip
CRD_RULES = [
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "verbs": ["get", "list", "watch"]},
]  # fmt: skip
NAMESPACE_RULES = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]


def by_identity(objects: list[Object]) -> dict[str, Object]:
    return {identity(obj): obj for obj in objects}


def container(objects: list[Object]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def env(objects: list[Object]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(objects)["env"]}


def test_all_namespaces_get_one_cluster_role_and_nothing_namespaced() -> None:
    objects = by_identity(render(InstallConfig()))
    prefix = "spotpool-operator-spotpool-system"
    assert objects[f"ClusterRole/{prefix}-pools"]["rules"] == POOL_RULES
    assert objects[f"ClusterRole/{prefix}-scan"]["rules"] == CRD_RULES  # no namespaces
    for role in ("pools", "scan"):
        binding = objects[f"ClusterRoleBinding/{prefix}-{role}"]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{prefix}-{role}",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "spotpool-operator", "namespace": "spotpool-system"}
        ]
    namespaced = [key for key in objects if key.startswith(("Role/", "RoleBinding/"))]
    lease = "spotpool-system/spotpool-operator-lease"
    assert sorted(namespaced) == [f"Role/{lease}", f"RoleBinding/{lease}"]  # the Lease only
    assert env(list(objects.values()))["SPOTPOOL_ALL_NAMESPACES"] == "true"


def test_watched_namespaces_each_get_a_role_and_no_cluster_wide_pool_rights() -> None:
    objects = by_identity(render(InstallConfig(watch_namespaces=["team-a", "team-b"])))
    for namespace in ("team-a", "team-b"):
        assert objects[f"Role/{namespace}/spotpool-operator"]["rules"] == POOL_RULES
        binding = objects[f"RoleBinding/{namespace}/spotpool-operator"]
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "spotpool-system"
    cluster_roles = [o for o in objects.values() if o["kind"] == "ClusterRole"]
    # kopf matches its namespace patterns against the listed namespaces (read-only).
    assert [role["rules"] for role in cluster_roles] == [CRD_RULES + NAMESPACE_RULES]
    assert "Role/spotpool-system/spotpool-operator" not in objects  # its own ns is not watched
    values = env(list(objects.values()))
    assert values["SPOTPOOL_NAMESPACE"] == "team-a,team-b"
    assert "SPOTPOOL_ALL_NAMESPACES" not in values


def test_leases_only_in_the_operators_namespace_and_only_what_holding_one_takes() -> None:
    for config in (InstallConfig(), InstallConfig(watch_namespaces=["team-a"])):
        granting = [
            o for o in render(config)
            for r in o.get("rules", []) if "coordination.k8s.io" in r["apiGroups"]
        ]  # fmt: skip
        assert [(o["kind"], o["metadata"]["namespace"]) for o in granting] == [
            ("Role", "spotpool-system")
        ]
        assert granting[0]["rules"] == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "create", "update", "delete"],
            }
        ]  # membership and shard Leases: held, listed, dead members' deleted


def test_no_rule_grants_wildcards_deletes_pods_nodes_leases_or_peering() -> None:
    for config in (InstallConfig(), InstallConfig(watch_namespaces=["team-a"])):
        for obj in render(config):
            for rule in obj.get("rules", []):
                if rule["apiGroups"] == ["coordination.k8s.io"]:
                    continue  # the Lease: the test above
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
                assert not {"delete", "deletecollection", "create", "update", "escalate",
                            "bind", "impersonate"} & set(rule["verbs"]) - (
                    {"create"} if rule["resources"] == ["events"] else set()
                )  # fmt: skip
                assert not {"pods", "nodes", "leases", "configmaps"} & set(rule["resources"])
                if "namespaces" in rule["resources"]:
                    assert config.watch_namespaces and rule["verbs"] == ["list", "watch"]
                assert not {"kopf.dev", "coordination.k8s.io"} & set(rule["apiGroups"])
                if "secrets" in rule["resources"]:
                    assert rule["verbs"] == ["get"]


def test_the_deployment_runs_locked_down_with_probes_on_kopfs_liveness_port() -> None:
    objects = render(InstallConfig())
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "spotpool-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == workload.USER_ID != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = container(objects)
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    defaults = OperatorSettings.model_fields
    assert ports == {
        "metrics": defaults["metrics_port"].default,
        "liveness": defaults["liveness_port"].default,
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert main["resources"]["requests"] and main["resources"]["limits"]["memory"]
    mounts = {mount["mountPath"] for mount in main["volumeMounts"]}
    # The root filesystem is read-only: everything written is a volume.
    assert {"/tmp", workload.WORK_DIR, workload.PULUMI_HOME, workload.STATE_DIR} <= mounts
    (service,) = [o for o in objects if o["kind"] == "Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_every_variable_set_for_the_operator_is_one_it_reads() -> None:
    command = typer.main.get_command(operator_app)
    run = getattr(command, "commands", {}).get("run", command)
    known = {param.envvar for param in run.params if isinstance(param.envvar, str)}
    config = InstallConfig(
        watch_namespaces=["a"], cloud_endpoint="http://127.0.0.1:1", backend_url="s3://b",
        notices={"enabled": True},
    )  # fmt: skip
    spotpool_vars = {name for name in env(render(config)) if name.startswith("SPOTPOOL_")}
    assert spotpool_vars <= known, spotpool_vars - known


def test_the_operator_reads_the_deployments_environment_as_intended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = InstallConfig(watch_namespaces=["team-a", "team-b"], max_concurrent=7)
    for name, value in env(render(config)).items():
        monkeypatch.setenv(name, value)
    command = typer.main.get_command(operator_app)
    run = getattr(command, "commands", {}).get("run", command)
    params = run.make_context("run", []).params
    assert params["namespace"] == ["team-a,team-b"]  # the operator splits on commas
    assert params["all_namespaces"] is False
    assert params["max_concurrent"] == 7 and params["refresh_interval"] == "60s"
    assert params["backend"] == f"file://{workload.STATE_DIR}/backend"
    assert str(params["passphrase_file"]) == f"{workload.PASSPHRASE_DIR}/passphrase"
    assert (params["metrics_host"], params["metrics_port"]) == ("0.0.0.0", 9090)
    assert params["liveness_port"] == 8081 and params["log_format"] == "json"
    monkeypatch.setenv("SPOTPOOL_ALL_NAMESPACES", "true")
    monkeypatch.delenv("SPOTPOOL_NAMESPACE")
    assert run.make_context("run", []).params["all_namespaces"] is True


def test_the_passphrase_and_backend_credentials_are_referenced_never_held() -> None:
    config = InstallConfig(backend_url="s3://state", backend_credentials_secret="state-keys")
    objects = render(config)
    assert not [o for o in objects if o["kind"] in ("Secret", "PersistentVolumeClaim")]
    main = container(objects)
    assert main["envFrom"] == [{"secretRef": {"name": "state-keys"}}]
    assert env(objects)["SPOTPOOL_BACKEND_URL"] == "s3://state"
    assert env(objects)["SPOTPOOL_PASSPHRASE_FILE"] == "/etc/spotpool/passphrase/passphrase"
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["passphrase"]["secret"]["secretName"] == "spotpool-passphrase"
    assert "state" not in volumes


def test_the_default_file_backend_lives_on_a_claim_of_the_configured_size() -> None:
    config = InstallConfig.model_validate({"storage": {"size": "5Gi", "storageClassName": "ssd"}})
    objects = by_identity(render(config))
    claim = objects["PersistentVolumeClaim/spotpool-system/spotpool-operator-state"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "5Gi"}}
    assert claim["spec"]["storageClassName"] == "ssd"
    values = env(list(objects.values()))
    assert values["SPOTPOOL_BACKEND_URL"] == f"file://{workload.STATE_DIR}/backend"


def test_the_crd_is_the_one_generated_from_the_spec_model() -> None:
    (definition,) = [o for o in render(InstallConfig()) if o["kind"] == "CustomResourceDefinition"]
    committed = yaml.safe_load((ROOT / crd.CRD_PATH).read_text())
    assert definition["spec"] == committed["spec"] == crd.render()["spec"]
    assert definition["metadata"]["name"] == committed["metadata"]["name"]


def test_settings_carry_through_and_bad_ones_are_refused() -> None:
    config = InstallConfig.model_validate(
        {"image": "registry.example/spotpool:1.2", "maxConcurrent": 9, "refreshInterval": "5m",
         "cloudEndpoint": "http://emulator:9000", "namespace": "ops"}
    )  # fmt: skip
    objects = render(config)
    assert container(objects)["image"] == "registry.example/spotpool:1.2"
    values = env(objects)
    assert values["SPOTPOOL_MAX_CONCURRENT"] == "9"
    assert values["SPOTPOOL_REFRESH_INTERVAL"] == "5m"
    assert values["SPOTPOOL_CLOUD_ENDPOINT"] == "http://emulator:9000"
    assert {o["metadata"].get("namespace") for o in objects} == {None, "ops"}
    for bad in (
        {"watchNamespaces": ["team-*"]},  # a Role needs a namespace known now
        {"watchNamespaces": ["a", "a"]},
        {"namespace": "Ops"},
        {"maxConcurrent": 0},
        {"refreshInterval": "soon"},
        {"refreshInterval": "0s"},
        {"imagePullPolicy": "Sometimes"},
        {"unknownSetting": 1},
    ):
        with pytest.raises(ValidationError):
            InstallConfig.model_validate(bad)


def test_every_operator_flag_is_a_setting_and_unset_scheduling_is_left_out() -> None:
    config = InstallConfig.model_validate(
        {"fullRefreshEvery": 0, "probeBudget": 0.5, "avoidFor": "10m", "operationTimeout": "1h",
         "leaseDuration": "45s", "apiLimits": "RunInstances=5", "maxConcurrentPerAccount": 2,
         "installId": "prod.pools", "operatorClass": "gpu", "extraArgs": ["--history-keep=3"],
         "extraEnv": [{"name": "X", "value": "1"}]}
    )  # fmt: skip
    objects = render(config)
    assert env(objects) | {"X": "1"} == env(objects)
    assert {k: v for k, v in env(objects).items() if k in FLAG_VARIABLES} == {
        "SPOTPOOL_FULL_REFRESH_EVERY": "0", "SPOTPOOL_PROBE_BUDGET": "0.5",
        "SPOTPOOL_AVOID_FOR": "10m", "SPOTPOOL_OPERATION_TIMEOUT": "1h",
        "SPOTPOOL_LEASE_DURATION": "45s", "SPOTPOOL_API_LIMITS": "RunInstances=5",
        "SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT": "2", "SPOTPOOL_INSTALL_ID": "prod.pools",
        "SPOTPOOL_OPERATOR_CLASS": "gpu",
    }  # fmt: skip
    assert container(objects)["args"] == ["operator", "run", "--history-keep=3"]
    defaults = env(render(InstallConfig()))
    assert defaults["SPOTPOOL_PROBE_BUDGET"] == "1"  # as Helm prints 1.0
    assert "SPOTPOOL_INSTALL_ID" not in defaults and "SPOTPOOL_API_LIMITS" not in defaults
    (deployment,) = [o for o in render(InstallConfig()) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    for unset in ("nodeSelector", "tolerations", "affinity", "priorityClassName",
                  "imagePullSecrets"):  # fmt: skip
        assert unset not in pod, unset
    assert pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"
    with pytest.raises(ValidationError):
        InstallConfig.model_validate({"leaseDuration": "0s"})


def test_the_image_is_registry_repository_and_tag_with_a_parent_charts_registry() -> None:
    assert container(render(InstallConfig()))["image"] == "spotpool-operator:0.1.0"
    shared = {"global": {"imageRegistry": "reg.example", "imagePullSecrets": [{"name": "g"}]}}
    objects = render(InstallConfig.model_validate(shared))
    assert container(objects)["image"] == "reg.example/spotpool-operator:0.1.0"
    own = InstallConfig.model_validate(
        {**shared, "image": {"registry": "ccr.example", "repository": "ops/sp", "tag": "2",
                             "pullPolicy": "Always"}, "imagePullSecrets": [{"name": "mine"}]}
    )  # fmt: skip
    (deployment,) = [o for o in render(own) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "ccr.example/ops/sp:2"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "mine"}, {"name": "g"}]
    legacy = InstallConfig.model_validate({"image": "r.example/a/b:3", "imagePullPolicy": "Never"})
    assert legacy.image.model_dump() == {
        "registry": None, "repository": "r.example/a/b", "tag": "3", "pull_policy": "Never",
    }  # fmt: skip


FLAG_VARIABLES = {
    "SPOTPOOL_FULL_REFRESH_EVERY", "SPOTPOOL_PROBE_BUDGET", "SPOTPOOL_AVOID_FOR",
    "SPOTPOOL_OPERATION_TIMEOUT", "SPOTPOOL_LEASE_DURATION", "SPOTPOOL_API_LIMITS",
    "SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT", "SPOTPOOL_INSTALL_ID", "SPOTPOOL_OPERATOR_CLASS",
}  # fmt: skip


def test_optional_namespace_and_crd_are_left_out_when_managed_elsewhere() -> None:
    objects = render(InstallConfig(create_namespace=False, install_crd=False))
    assert not {"Namespace", "CustomResourceDefinition"} & {o["kind"] for o in objects}


def test_replicas_share_an_s3_backend_roll_one_by_one_and_are_evicted_one_at_a_time() -> None:
    with pytest.raises(ValueError, match="needs a shared backendUrl"):
        InstallConfig(replicas=3)
    config = InstallConfig(replicas=3, shards=32, backend_url="s3://state?region=ap-singapore")
    objects = {identity(o): o for o in render(config)}
    deployment = objects["Deployment/spotpool-system/spotpool-operator"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "SPOTPOOL_SHARDS", "value": "32"} in container["env"]
    budget = objects["PodDisruptionBudget/spotpool-system/spotpool-operator"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert "PersistentVolumeClaim/spotpool-system/spotpool-operator-state" not in objects


def test_notices_are_off_by_default_and_when_on_the_port_is_wired_to_a_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = render(InstallConfig())
    assert [p["name"] for p in container(default)["ports"]] == ["metrics", "liveness"]
    assert not {"SPOTPOOL_NOTICE_PORT", "SPOTPOOL_NOTICE_URL"} & set(env(default))
    assert [o["metadata"]["name"] for o in default if o["kind"] == "Service"] == [
        "spotpool-operator-metrics"
    ]

    objects = render(InstallConfig(namespace="ops", notices={"enabled": True, "port": 8443}))
    ports = {p["name"]: p for p in container(objects)["ports"]}
    assert ports["notices"] == {"name": "notices", "containerPort": 8443, "protocol": "TCP"}
    service = by_identity(objects)["Service/ops/spotpool-operator-notices"]
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (8443, "notices")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["type"] == "ClusterIP"

    for name, value in env(objects).items():  # what the operator makes of the environment
        monkeypatch.setenv(name, value)
    command = typer.main.get_command(operator_app)
    run = getattr(command, "commands", {}).get("run", command)
    params = run.make_context("run", []).params
    assert (params["notice_host"], params["notice_port"]) == ("0.0.0.0", 8443)
    assert params["notice_url"] == "http://spotpool-operator-notices.ops.svc:8443"
    settings = OperatorSettings.model_validate(
        {k: params[k] for k in ("notice_host", "notice_port", "notice_url")}
        | {"engine": {"backend_url": "file:///x", "passphrase": "p", "work_root": "/x"}}
    )
    assert settings.notice_endpoint() == "http://spotpool-operator-notices.ops.svc:8443"


def test_the_notice_url_for_instances_outside_the_cluster_and_a_load_balancer() -> None:
    internal = {"service.kubernetes.io/qcloud-loadbalancer-internal-subnetid": "subnet-1"}
    config = InstallConfig.model_validate(
        {"notices": {"enabled": True, "url": "http://10.0.3.7:8090",
                     "serviceType": "LoadBalancer", "serviceAnnotations": internal}}
    )  # fmt: skip
    objects = render(config)
    assert env(objects)["SPOTPOOL_NOTICE_URL"] == "http://10.0.3.7:8090"
    service = by_identity(objects)["Service/spotpool-system/spotpool-operator-notices"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == internal
    for bad in ("10.0.3.7:8090", "http://", "ftp://x", "http://a b"):
        with pytest.raises(ValidationError, match=r"notices\.url"):
            InstallConfig.model_validate({"notices": {"enabled": True, "url": bad}})
    with pytest.raises(ValidationError, match=r"notices\.serviceType"):
        InstallConfig.model_validate({"notices": {"serviceType": "External"}})
