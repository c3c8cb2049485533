"""The install's objects as the chart renders them (the real helm): least-privilege RBAC, a
locked-down Deployment whose environment the operator reads as intended, the values that
change them."""

from typing import Any

import pytest
import typer
from spotpool_operator.basics.settings import OperatorSettings
from spotpool_operator.process.cli import app as operator_app

from tests.deploy.rendered import by_identity, container, deployment, env, objects, pod, refusal

pytestmark = pytest.mark.unit

STATE_DIR = "/var/lib/spotpool/state"  # the paths operator/Dockerfile expects
WORK_DIR = "/var/lib/spotpool/work"
PULUMI_HOME = "/var/lib/spotpool/pulumi"
USER_ID = 10001
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
    {"apiGroups": ["devops.jokerbai.com"], "resources": ["spotpoolaccesspolicies"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["devops.jokerbai.com"], "resources": ["spotpoolaccesspolicies/status"],
     "verbs": ["patch"]},
]  # fmt: skip
# A namespace's labels select access policies (get); kopf, serving some, lists and watches.
LABEL_RULES = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
NAMESPACE_RULES = [
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}
]
# Pools whose instances are nodes (docs/nodes.md): their Nodes found, labelled, cordoned and
# deleted, their pods (of any namespace) listed and evicted through the Eviction API.
NODE_RULES = [
    {"apiGroups": [""], "resources": ["nodes"],
     "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
]  # fmt: skip


def _run_params(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> dict[str, Any]:
    """What `spotpool operator run` makes of the environment."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    command = typer.main.get_command(operator_app)
    run = getattr(command, "commands", {}).get("run", command)
    params: dict[str, Any] = run.make_context("run", []).params
    return params


def test_all_namespaces_get_one_cluster_role_and_nothing_namespaced() -> None:
    found = by_identity(objects())
    prefix = "spotpool-operator-spotpool-system"
    assert found[f"ClusterRole/{prefix}-pools"]["rules"] == POOL_RULES
    assert found[f"ClusterRole/{prefix}-scan"]["rules"] == CRD_RULES + LABEL_RULES  # no list
    assert found[f"ClusterRole/{prefix}-nodes"]["rules"] == NODE_RULES
    for role in ("pools", "scan", "nodes"):
        binding = found[f"ClusterRoleBinding/{prefix}-{role}"]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": f"{prefix}-{role}",
        }  # fmt: skip
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "spotpool-operator", "namespace": "spotpool-system"}
        ]
    namespaced = [key for key in found if key.startswith(("Role/", "RoleBinding/"))]
    lease = "spotpool-system/spotpool-operator-lease"
    assert sorted(namespaced) == [f"Role/{lease}", f"RoleBinding/{lease}"]  # the Lease only
    assert env(list(found.values()))["SPOTPOOL_ALL_NAMESPACES"] == "true"


def test_watched_namespaces_each_get_a_role_and_no_cluster_wide_pool_rights() -> None:
    found = by_identity(objects({"watchNamespaces": ["team-a", "team-b"]}))
    for namespace in ("team-a", "team-b"):
        assert found[f"Role/{namespace}/spotpool-operator"]["rules"] == POOL_RULES
        binding = found[f"RoleBinding/{namespace}/spotpool-operator"]
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "spotpool-system"
    cluster_roles = [o for o in found.values() if o["kind"] == "ClusterRole"]
    # kopf matches its namespace patterns against the listed namespaces (read-only).
    assert [role["rules"] for role in cluster_roles] == [CRD_RULES + NAMESPACE_RULES, NODE_RULES]
    assert "Role/spotpool-system/spotpool-operator" not in found  # its own ns is not watched
    variables = env(list(found.values()))
    assert variables["SPOTPOOL_NAMESPACE"] == "team-a,team-b"
    assert "SPOTPOOL_ALL_NAMESPACES" not in variables


def test_leases_only_in_the_operators_namespace_and_only_what_holding_one_takes() -> None:
    for values in ({}, {"watchNamespaces": ["team-a"]}):
        granting = [
            o for o in objects(values)
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
            },
            *INTERRUPTION_RULES,
        ]  # fmt: skip  membership and shard Leases: held, listed, dead members' deleted


# The learned interruption rates: one ConfigMap in the operator's namespace, made once, then
# only read and replaced (a create cannot name its object; get and update can).
INTERRUPTION_RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["spotpool-operator-interruptions"],
        "verbs": ["get", "update"],
    },
]


def test_no_rule_grants_wildcards_deletes_pods_nodes_leases_or_peering() -> None:
    for values in ({}, {"watchNamespaces": ["team-a"]}):
        for obj in objects(values):
            for rule in obj.get("rules", []):
                if rule["apiGroups"] == ["coordination.k8s.io"] or rule in INTERRUPTION_RULES:
                    continue  # the Lease Role's: the test above
                if rule in NODE_RULES:
                    continue  # the nodes ClusterRole's: the test below
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
                assert not {"delete", "deletecollection", "create", "update", "escalate",
                            "bind", "impersonate"} & set(rule["verbs"]) - (
                    {"create"} if rule["resources"] == ["events"] else set()
                )  # fmt: skip
                assert not {"pods", "nodes", "leases", "configmaps"} & set(rule["resources"])
                if "namespaces" in rule["resources"]:  # labels (get); kopf's list, watch
                    assert rule["verbs"] == (["get", "list", "watch"] if values else ["get"])
                assert not {"kopf.dev", "coordination.k8s.io"} & set(rule["apiGroups"])
                if "secrets" in rule["resources"]:
                    assert rule["verbs"] == ["get"]


def test_node_rights_are_a_cluster_role_of_their_own_that_nodeRights_false_leaves_out() -> None:
    prefix = "spotpool-operator-spotpool-system"
    for values in ({}, {"watchNamespaces": ["team-a"]}):
        found = by_identity(objects(values))
        granting = [o for o in found.values()
                    if any(r in NODE_RULES for r in o.get("rules", []))]  # fmt: skip
        assert [o["metadata"]["name"] for o in granting] == [f"{prefix}-nodes"]
        assert granting[0]["kind"] == "ClusterRole" and granting[0]["rules"] == NODE_RULES
    off = by_identity(objects({"nodeRights": False}))
    assert f"ClusterRole/{prefix}-nodes" not in off
    assert f"ClusterRoleBinding/{prefix}-nodes" not in off
    assert not [r for o in off.values() for r in o.get("rules", [])
                if {"nodes", "pods", "pods/eviction"} & set(r["resources"])]  # fmt: skip


def test_the_deployment_runs_locked_down_with_probes_on_kopfs_liveness_port() -> None:
    found = objects()
    spec = deployment(found)["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert pod(found)["serviceAccountName"] == "spotpool-operator"
    assert pod(found)["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID,
        "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    main = container(found)
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
        "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
    }  # fmt: skip
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
    assert {"/tmp", WORK_DIR, PULUMI_HOME, STATE_DIR} <= mounts
    (service,) = [o for o in found if o["kind"] == "Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_every_variable_set_for_the_operator_is_one_it_reads() -> None:
    command = typer.main.get_command(operator_app)
    run = getattr(command, "commands", {}).get("run", command)
    known = {param.envvar for param in run.params if isinstance(param.envvar, str)}
    values = {"watchNamespaces": ["a"], "cloudEndpoint": "http://127.0.0.1:1",
              "backendUrl": "s3://b", "notices": {"enabled": True}, "installId": "x",
              "operatorClass": "c", "apiLimits": "RunInstances=5"}  # fmt: skip
    spotpool_vars = {name for name in env(objects(values)) if name.startswith("SPOTPOOL_")}
    assert spotpool_vars <= known, spotpool_vars - known


def test_the_operator_reads_the_deployments_environment_as_intended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = objects({"watchNamespaces": ["team-a", "team-b"], "maxConcurrent": 7})
    params = _run_params(monkeypatch, env(found))
    assert params["namespace"] == ["team-a,team-b"]  # the operator splits on commas
    assert params["all_namespaces"] is False
    assert params["max_concurrent"] == 7 and params["refresh_interval"] == "60s"
    assert params["backend"] == f"file://{STATE_DIR}/backend"
    assert str(params["passphrase_file"]) == "/etc/spotpool/passphrase/passphrase"
    assert (params["metrics_host"], params["metrics_port"]) == ("0.0.0.0", 9090)
    assert params["liveness_port"] == 8081 and params["log_format"] == "json"
    monkeypatch.setenv("SPOTPOOL_ALL_NAMESPACES", "true")
    monkeypatch.delenv("SPOTPOOL_NAMESPACE")
    assert _run_params(monkeypatch, {})["all_namespaces"] is True


def test_the_passphrase_and_backend_credentials_are_referenced_never_held() -> None:
    found = objects({"backendUrl": "s3://state", "backendCredentialsSecret": "state-keys"})
    assert not [o for o in found if o["kind"] in ("Secret", "PersistentVolumeClaim")]
    assert container(found)["envFrom"] == [{"secretRef": {"name": "state-keys"}}]
    assert env(found)["SPOTPOOL_BACKEND_URL"] == "s3://state"
    assert env(found)["SPOTPOOL_PASSPHRASE_FILE"] == "/etc/spotpool/passphrase/passphrase"
    volumes = {v["name"]: v for v in pod(found)["volumes"]}
    assert volumes["passphrase"]["secret"] == {
        "secretName": "spotpool-passphrase", "defaultMode": 0o440,
        "items": [{"key": "passphrase", "path": "passphrase"}],
    }  # fmt: skip
    assert "state" not in volumes


def test_the_default_file_backend_lives_on_a_claim_of_the_configured_size() -> None:
    found = by_identity(objects({"storage": {"size": "5Gi", "storageClassName": "ssd"}}))
    claim = found["PersistentVolumeClaim/spotpool-system/spotpool-operator-state"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "ssd",
    }  # fmt: skip
    assert env(list(found.values()))["SPOTPOOL_BACKEND_URL"] == f"file://{STATE_DIR}/backend"
    volumes = {v["name"]: v for v in pod(list(found.values()))["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"] == {"claimName": "spotpool-operator-state"}


FLAG_VARIABLES = {
    "SPOTPOOL_FULL_REFRESH_EVERY", "SPOTPOOL_PROBE_BUDGET", "SPOTPOOL_AVOID_FOR",
    "SPOTPOOL_OPERATION_TIMEOUT", "SPOTPOOL_LEASE_DURATION", "SPOTPOOL_API_LIMITS",
    "SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT", "SPOTPOOL_INSTALL_ID", "SPOTPOOL_OPERATOR_CLASS",
}  # fmt: skip


def test_every_operator_flag_is_a_value_and_unset_scheduling_is_left_out() -> None:
    found = objects(
        {"fullRefreshEvery": 0, "probeBudget": 0.5, "avoidFor": "10m", "operationTimeout": "1h",
         "leaseDuration": "45s", "apiLimits": "RunInstances=5", "maxConcurrentPerAccount": 2,
         "installId": "prod.pools", "operatorClass": "gpu", "extraArgs": ["--history-keep=3"],
         "extraEnv": [{"name": "X", "value": "1"}]}
    )  # fmt: skip
    assert env(found)["X"] == "1"
    assert {k: v for k, v in env(found).items() if k in FLAG_VARIABLES} == {
        "SPOTPOOL_FULL_REFRESH_EVERY": "0", "SPOTPOOL_PROBE_BUDGET": "0.5",
        "SPOTPOOL_AVOID_FOR": "10m", "SPOTPOOL_OPERATION_TIMEOUT": "1h",
        "SPOTPOOL_LEASE_DURATION": "45s", "SPOTPOOL_API_LIMITS": "RunInstances=5",
        "SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT": "2", "SPOTPOOL_INSTALL_ID": "prod.pools",
        "SPOTPOOL_OPERATOR_CLASS": "gpu",
    }  # fmt: skip
    assert container(found)["args"] == ["operator", "run", "--history-keep=3"]
    defaults = objects()
    assert env(defaults)["SPOTPOOL_PROBE_BUDGET"] == "1"
    assert "SPOTPOOL_INSTALL_ID" not in env(defaults)
    assert "SPOTPOOL_API_LIMITS" not in env(defaults)
    for unset in ("nodeSelector", "tolerations", "affinity", "priorityClassName",
                  "imagePullSecrets"):  # fmt: skip
        assert unset not in pod(defaults), unset
    assert pod(defaults)["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_replicas_share_an_s3_backend_roll_one_by_one_and_are_evicted_one_at_a_time() -> None:
    assert "backendUrl" in refusal({"replicas": 3})  # each pod would have its own file://
    found = by_identity(
        objects({"replicas": 3, "shards": 32, "backendUrl": "s3://state?region=ap-singapore"})
    )
    spec = found["Deployment/spotpool-system/spotpool-operator"]["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}
    }  # fmt: skip
    assert env(list(found.values()))["SPOTPOOL_SHARDS"] == "32"
    budget = found["PodDisruptionBudget/spotpool-system/spotpool-operator"]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": spec["selector"]}
    assert "PersistentVolumeClaim/spotpool-system/spotpool-operator-state" not in found


def test_notices_are_off_by_default_and_when_on_the_port_is_wired_to_a_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = objects()
    assert [p["name"] for p in container(default)["ports"]] == ["metrics", "liveness"]
    assert not {"SPOTPOOL_NOTICE_PORT", "SPOTPOOL_NOTICE_URL"} & set(env(default))
    assert [o["metadata"]["name"] for o in default if o["kind"] == "Service"] == [
        "spotpool-operator-metrics"
    ]

    found = objects({"notices": {"enabled": True, "port": 8443}}, namespace="ops")
    ports = {p["name"]: p for p in container(found)["ports"]}
    assert ports["notices"] == {"name": "notices", "containerPort": 8443, "protocol": "TCP"}
    service = by_identity(found)["Service/ops/spotpool-operator-notices"]
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (8443, "notices")
    assert service["spec"]["selector"] == deployment(found)["spec"]["selector"]["matchLabels"]
    assert service["spec"]["type"] == "ClusterIP"

    params = _run_params(monkeypatch, env(found))
    assert (params["notice_host"], params["notice_port"]) == ("0.0.0.0", 8443)
    assert params["notice_url"] == "http://spotpool-operator-notices.ops.svc:8443"


def test_the_notice_url_for_instances_outside_the_cluster_and_a_load_balancer() -> None:
    internal = {"service.kubernetes.io/qcloud-loadbalancer-internal-subnetid": "subnet-1"}
    found = objects(
        {"notices": {"enabled": True, "url": "http://10.0.3.7:8090",
                     "serviceType": "LoadBalancer", "serviceAnnotations": internal}}
    )  # fmt: skip
    assert env(found)["SPOTPOOL_NOTICE_URL"] == "http://10.0.3.7:8090"
    service = by_identity(found)["Service/spotpool-system/spotpool-operator-notices"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == internal
    for bad in ("10.0.3.7:8090", "http://", "ftp://x", "http://a b"):
        assert "/notices/url" in refusal({"notices": {"enabled": True, "url": bad}})
    assert "/notices/serviceType" in refusal({"notices": {"serviceType": "External"}})


def test_two_installs_in_one_namespace_have_leases_and_install_ids_of_their_own() -> None:
    """Two releases side by side (each its own fullnameOverride) would otherwise share the Lease
    `spotpool-operator`: one install's replicas would hold the other's shards and never serve
    its pools, and both would tag instances with one install id."""
    first, second = env(objects()), env(objects({"fullnameOverride": "gpu-pools"}))
    assert first["SPOTPOOL_LEASE_NAME"] == "spotpool-operator"  # as before: upgrades keep it
    assert second["SPOTPOOL_LEASE_NAME"] == "gpu-pools"


def test_the_network_policy_is_on_by_default_and_admits_only_what_it_names() -> None:
    """Issue 41: metrics from the monitoring namespace, notices from the VPC's ranges. Issue 46:
    on by default (before: off, and the metrics — every namespace's pools, sizes and costs —
    open to every pod); off only when asked."""
    (default,) = [o for o in objects() if o["kind"] == "NetworkPolicy"]
    assert default["spec"]["policyTypes"] == ["Ingress"]
    (metrics_only,) = default["spec"]["ingress"]  # notices off by default: no rule for them
    assert metrics_only["ports"] == [{"port": 9090, "protocol": "TCP"}]
    selector = metrics_only["from"][0]["namespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["monitoring"]
    off = objects({"networkPolicy": {"enabled": False}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy"]
    found = objects(
        {"networkPolicy": {"enabled": True, "noticeCIDRs": ["10.0.0.0/16", "10.1.0.0/16"]},
         "notices": {"enabled": True, "port": 8090}, "metrics": {"port": 9090}}
    )  # fmt: skip
    (policy,) = [o for o in found if o["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    labels = deployment(found)["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    metrics, notices = spec["ingress"]
    assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]
    (selector,) = metrics["from"]
    assert selector["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    assert notices["ports"] == [{"port": 8090, "protocol": "TCP"}]
    assert [f["ipBlock"]["cidr"] for f in notices["from"]] == ["10.0.0.0/16", "10.1.0.0/16"]


def test_the_listeners_bind_the_addresses_the_values_give() -> None:
    variables = env(objects({"metrics": {"bindAddress": "10.0.0.5"},
                             "health": {"bindAddress": "127.0.0.1"}}))  # fmt: skip
    assert variables["SPOTPOOL_METRICS_HOST"] == "10.0.0.5"
    assert variables["SPOTPOOL_LIVENESS_HOST"] == "127.0.0.1"


def test_an_explicit_cluster_id_needs_no_namespace_read_and_reaches_the_operator() -> None:
    found = by_identity(objects({"clusterId": "prod-eu-1", "sweep": "report"}))
    prefix = "spotpool-operator-spotpool-system"
    assert found[f"ClusterRole/{prefix}-scan"]["rules"] == CRD_RULES + LABEL_RULES
    variables = env(list(found.values()))
    assert variables["SPOTPOOL_CLUSTER_ID"] == "prod-eu-1"
    assert variables["SPOTPOOL_SWEEP"] == "report"
    assert "SPOTPOOL_SWEEP" not in env(objects())  # the default, terminate, says nothing


def test_the_access_policies_admission_policy_and_its_binding() -> None:
    """The SpotpoolAccessPolicies are its parameters (every one, each must pass), it looks only
    at specs a person writes (the operator's finalizer patches pass), and it can be left out."""
    found = by_identity(objects())
    name = "spotpool-operator-spotpool-system-access"
    policy = found[f"ValidatingAdmissionPolicy/{name}"]["spec"]
    assert policy["paramKind"] == {
        "apiVersion": "devops.jokerbai.com/v1", "kind": "SpotpoolAccessPolicy"
    }  # fmt: skip
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConditions"][0]["expression"] == (
        "request.operation == 'CREATE' || object.spec != oldObject.spec"
    )
    checked = " ".join(v["expression"] for v in policy["validations"])
    for field in ("useOperatorIdentity", "assumeRole.roleArn", "spec.region"):
        assert field in checked, field
    binding = found[f"ValidatingAdmissionPolicyBinding/{name}"]["spec"]
    assert binding == {
        "policyName": name,
        "validationActions": ["Deny"],
        "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
    }
    off = objects({"accessPolicy": {"admission": False}})
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]
