"""What each pinned tool is, where it comes from, and how to tell it is installed.

Versions follow the pinned Python packages in pyproject.toml: the Pulumi CLI matches
`pulumi`, each resource plugin matches the SDK package that asks the engine for it.
"""

from spotpool.toolchain.tool_specs import GoBuild, LocalSource, SourcePatch, Tool

# The newest pulumi/pkg/v3 the Go module proxy serves here (v3.272.0 is refused).
PULUMI_VERSION = "3.259.0"
TENCENTCLOUD_PLUGIN_VERSION = "0.2.3"
# The proxy refuses the pulumi-tencentcloud provider module (every version tried) and every
# recent terraform-provider-tencentcloud; v1.81.20 is served, with the bridge release that
# pulumi-tencentcloud itself built it with. Our recipe wires the two together.
TENCENTCLOUD_TERRAFORM_VERSION = "v1.81.20"
TERRAFORM_BRIDGE_VERSION = "v3.24.1"
KUBERNETES_PLUGIN_VERSION = "4.34.2"
KUBERNETES_VERSION = "1.36.3"
ETCD_VERSION = "3.6.8"  # the etcd that k8s.io/kubernetes v1.36.3 itself pins
VERSITYGW_VERSION = "1.8.0"  # an S3 gateway over a directory: the shared-backend tests' S3
# The newest helm v3 the Go module proxy serves here; its client-go (v0.37) is one minor
# ahead of the local kube-apiserver, within the supported skew.
HELM_VERSION = "3.22.0"
# Prometheus 3.16.0 (its Go module tags are v0.3xx.y) scrapes the operator in the tests, and the
# Prometheus Operator's ServiceMonitor CRD checks the chart's ServiceMonitor.
PROMETHEUS_VERSION = "3.16.0"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
# KWOK plays the kubelets of the local world's nodes (tests only); v0.8.0 is built on
# k8s.io v0.36, and its build is lifted to the cluster's own v0.36 patch.
KWOK_VERSION = "0.8.0"


# The API proxy refuses a call whose X-TC-Action is not signed (it could be swapped on a
# captured request: same body, another action). The API accepts any signed header set that
# holds content-type and host, and lowercases the action's value in the canonical form.
SIGN_ACTION = SourcePatch(
    module="github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common",
    version="v1.0.715",
    file="client.go",
    old=(
        'canonicalHeaders := fmt.Sprintf("content-type:%s\\nhost:%s\\n", '
        'headers["Content-Type"], headers["Host"])\n'
        '\tsignedHeaders := "content-type;host"\n'
    ),
    new=(
        'canonicalHeaders := fmt.Sprintf("content-type:%s\\nhost:%s\\nx-tc-action:%s\\n", '
        'headers["Content-Type"], headers["Host"], strings.ToLower(headers["X-TC-Action"]))\n'
        '\tsignedHeaders := "content-type;host;x-tc-action"\n'
    ),
    why="sign X-TC-Action (TC3)",
)


PULUMI_VERSION_VAR = "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"


def _x(var: str, value: str) -> str:
    return f"-X {var}={value}"


TOOLS: list[Tool] = [
    Tool(
        name="pulumi",
        version=PULUMI_VERSION,
        revision="lean1",  # zxcvbn stubbed
        binary="pulumi",
        version_args=["version"],
        download_url=f"https://get.pulumi.com/releases/sdk/pulumi-v{PULUMI_VERSION}-linux-x64.tar.gz",
        download_member="pulumi/pulumi",
        build=GoBuild(
            module="github.com/pulumi/pulumi/pkg/v3",
            version=f"v{PULUMI_VERSION}",
            package="github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
            stubs=dict.fromkeys(
                ["github.com/nbutton23/zxcvbn-go", "github.com/ccojocar/zxcvbn-go"], "zxcvbn"
            ),
            ldflags=[
                _x(
                    "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version",
                    f"v{PULUMI_VERSION}",
                )
            ],
        ),
    ),
    Tool(
        name="pulumi-language-python",
        version=PULUMI_VERSION,
        binary="pulumi-language-python",
        version_args=["-version"],
        download_url=f"https://get.pulumi.com/releases/sdk/pulumi-v{PULUMI_VERSION}-linux-x64.tar.gz",
        download_member="pulumi/pulumi-language-python",
        build=GoBuild(
            module="github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3",
            version=f"v{PULUMI_VERSION}",
            package="github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3",
            ldflags=[
                _x(
                    "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version",
                    f"v{PULUMI_VERSION}",
                )
            ],
        ),
        # The proxy refuses this module at every version; the source folder is the module's
        # own files with its monorepo replaces dropped (see its README).
        local_source=LocalSource(
            folder=f"pulumi-language-python-{PULUMI_VERSION}",
            ldflags=[_x(PULUMI_VERSION_VAR, f"v{PULUMI_VERSION}")],
        ),
        # The CLI runs the language host it finds beside its own (resolved) binary without
        # looking at PATH, and the host runs the shim beside itself.
        beside="pulumi",
        extra_files={
            "pulumi-language-python-exec": (
                "github.com/pulumi/pulumi/sdk/v3",
                f"v{PULUMI_VERSION}",
                "python/cmd/pulumi-language-python-exec",
            )
        },
    ),
    Tool(
        name="pulumi-resource-tencentcloud",
        version=TENCENTCLOUD_PLUGIN_VERSION,
        # lean1: only the mapped resource kept (no schema validation of 1,250);
        # lean2: X-TC-Action signed (the SDK's TC3 signs only content-type and host).
        revision="lean2",
        binary="pulumi-resource-tencentcloud",
        version_args=["-version"],
        plugin=("resource", "tencentcloud"),
        download_url=(
            "https://github.com/tencentcloudstack/pulumi-tencentcloud/releases/download/"
            f"v{TENCENTCLOUD_PLUGIN_VERSION}/pulumi-resource-tencentcloud-"
            f"v{TENCENTCLOUD_PLUGIN_VERSION}-linux-amd64.tar.gz"
        ),
        download_member="pulumi-resource-tencentcloud",
        build=GoBuild(
            module="github.com/tencentcloudstack/terraform-provider-tencentcloud",
            version=TENCENTCLOUD_TERRAFORM_VERSION,
            package=".",
            recipe="pulumi-resource-tencentcloud",
            requires={
                "github.com/pulumi/pulumi-terraform-bridge/v3": TERRAFORM_BRIDGE_VERSION,
                "github.com/hashicorp/terraform-plugin-sdk/v2": "v2.20.0",
            },
            replaces={
                # The bridge needs Pulumi's fork of the plugin SDK (as pulumi-tencentcloud has).
                "github.com/hashicorp/terraform-plugin-sdk/v2": (
                    "github.com/pulumi/terraform-plugin-sdk/v2 v2.0.0-20220824175045-450992f2f5b9"
                ),
            },
            checksum_db=False,
            patches=[SIGN_ACTION],
            ldflags=[
                _x("main.version", TENCENTCLOUD_PLUGIN_VERSION),
                _x(
                    "github.com/tencentcloudstack/terraform-provider-tencentcloud/tencentcloud/"
                    "connectivity.ReqClient",
                    f"Pulumi-{TENCENTCLOUD_PLUGIN_VERSION}",
                ),
            ],
        ),
    ),
    Tool(
        name="pulumi-resource-kubernetes",
        version=KUBERNETES_PLUGIN_VERSION,
        binary="pulumi-resource-kubernetes",
        version_args=[],  # it has no version flag: it starts serving
        version_in_build_info=f"pkg/version.Version={KUBERNETES_PLUGIN_VERSION}",
        plugin=("resource", "kubernetes"),
        download_url=(
            "https://get.pulumi.com/releases/plugins/pulumi-resource-kubernetes-"
            f"v{KUBERNETES_PLUGIN_VERSION}-linux-amd64.tar.gz"
        ),
        download_member="pulumi-resource-kubernetes",
        build=GoBuild(
            module="github.com/pulumi/pulumi-kubernetes/provider/v4",
            version=f"v{KUBERNETES_PLUGIN_VERSION}",
            package="github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes",
            ldflags=[
                _x(
                    "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version",
                    KUBERNETES_PLUGIN_VERSION,
                )
            ],
        ),
        # Refused by the proxy too; the folder holds the provider with its generated schema.
        local_source=LocalSource(
            folder=f"pulumi-kubernetes-provider-{KUBERNETES_PLUGIN_VERSION}",
            module_dir="provider",
            package="./cmd/pulumi-resource-kubernetes",
            ldflags=[
                "-s",
                "-w",
                _x(
                    "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version",
                    KUBERNETES_PLUGIN_VERSION,
                ),
            ],
        ),
    ),
    Tool(
        name="etcd",
        version=ETCD_VERSION,
        binary="etcd",
        version_args=["--version"],
        download_url=(
            f"https://github.com/etcd-io/etcd/releases/download/v{ETCD_VERSION}/"
            f"etcd-v{ETCD_VERSION}-linux-amd64.tar.gz"
        ),
        download_member=f"etcd-v{ETCD_VERSION}-linux-amd64/etcd",
        build=GoBuild(
            module="go.etcd.io/etcd/server/v3",
            version=f"v{ETCD_VERSION}",
            package="go.etcd.io/etcd/server/v3",
        ),
    ),
]


def _kubernetes_command(name: str) -> Tool:
    """kube-apiserver and kubectl come from the same release of k8s.io/kubernetes."""
    minor = KUBERNETES_VERSION.split(".")[1]
    return Tool(
        name=name,
        version=KUBERNETES_VERSION,
        binary=name,
        version_args=["version", "--client"] if name == "kubectl" else ["--version"],
        download_url=f"https://dl.k8s.io/v{KUBERNETES_VERSION}/bin/linux/amd64/{name}",
        build=GoBuild(
            module="k8s.io/kubernetes",
            version=f"v{KUBERNETES_VERSION}",
            package=f"k8s.io/kubernetes/cmd/{name}",
            sibling_version=f"v0.{KUBERNETES_VERSION.split('.', 1)[1]}",
            ldflags=[
                _x("k8s.io/component-base/version.gitVersion", f"v{KUBERNETES_VERSION}"),
                _x("k8s.io/component-base/version.gitMajor", "1"),
                _x("k8s.io/component-base/version.gitMinor", minor),
            ],
        ),
    )


TOOLS += [
    _kubernetes_command("kube-apiserver"),
    _kubernetes_command("kube-controller-manager"),
    _kubernetes_command("kube-scheduler"),  # the tests' nodes only: not a demo tool
    _kubernetes_command("kubectl"),
]

# Same k8s.io minor as the cluster's tools: the client libraries at its patch release.
_K8S_STAGING = f"v0.{KUBERNETES_VERSION.split('.', 1)[1]}"
TOOLS.append(
    Tool(
        name="kwok",
        version=KWOK_VERSION,
        binary="kwok",
        version_args=["--version"],
        download_url=(
            f"https://github.com/kubernetes-sigs/kwok/releases/download/v{KWOK_VERSION}/"
            "kwok-linux-amd64"
        ),
        build=GoBuild(
            module="sigs.k8s.io/kwok",
            version=f"v{KWOK_VERSION}",
            package="sigs.k8s.io/kwok/cmd/kwok",
            requires={
                f"k8s.io/{name}": _K8S_STAGING
                for name in (
                    *("api", "apimachinery", "apiserver", "client-go", "component-base"),
                    *("cri-api", "cri-client", "cri-streaming"),
                )
            },
            ldflags=[
                _x("sigs.k8s.io/kwok/pkg/consts.Version", f"v{KWOK_VERSION}"),
                _x("sigs.k8s.io/kwok/pkg/consts.KubeVersion", f"v{KUBERNETES_VERSION}"),
            ],
        ),
    )
)
TOOLS.append(
    Tool(
        name="versitygw",
        version=VERSITYGW_VERSION,
        binary="versitygw",
        version_args=["--version"],
        download_url=(
            f"https://github.com/versity/versitygw/releases/download/v{VERSITYGW_VERSION}/"
            f"versitygw_v{VERSITYGW_VERSION}_Linux_x86_64.tar.gz"
        ),
        download_member="versitygw",
        build=GoBuild(
            module="github.com/versity/versitygw",
            version=f"v{VERSITYGW_VERSION}",
            package="github.com/versity/versitygw/cmd/versitygw",
            ldflags=[_x("main.Version", f"v{VERSITYGW_VERSION}")],
        ),
    )
)

TOOLS.append(
    Tool(
        name="helm",
        version=HELM_VERSION,
        binary="helm",
        version_args=["version", "--short"],
        download_url=f"https://get.helm.sh/helm-v{HELM_VERSION}-linux-amd64.tar.gz",
        download_member="linux-amd64/helm",
        build=GoBuild(
            module="helm.sh/helm/v3",
            version=f"v{HELM_VERSION}",
            package="helm.sh/helm/v3/cmd/helm",
            # As helm's Makefile builds a release: stripped, the version stamped, and the
            # Kubernetes version that lint and template assume (from its client-go, v0.37).
            ldflags=[
                "-s",
                "-w",
                _x("helm.sh/helm/v3/internal/version.version", f"v{HELM_VERSION}"),
                _x("helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor", "1"),
                _x("helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor", "37"),
                _x("helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor", "1"),
                _x("helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor", "37"),
            ],
        ),
    )
)


_PROMETHEUS_TARBALL = (
    f"https://github.com/prometheus/prometheus/releases/download/v{PROMETHEUS_VERSION}/"
    f"prometheus-{PROMETHEUS_VERSION}.linux-amd64.tar.gz"
)


def _prometheus_build(command: str) -> GoBuild:
    """One of the prometheus module's commands, built alike (prometheus, promtool)."""
    return GoBuild(
        module="github.com/prometheus/prometheus",
        version=PROMETHEUS_MODULE_VERSION,
        package=f"github.com/prometheus/prometheus/cmd/{command}",
        # Static scrape targets are all the tests use: no cloud service discovery (a
        # build a third the size and time).
        tags=["remove_all_sd"],
        ldflags=[
            "-s",
            "-w",
            _x("github.com/prometheus/common/version.Version", PROMETHEUS_VERSION),
        ],
    )


TOOLS.append(
    Tool(
        name="prometheus",
        version=PROMETHEUS_VERSION,
        binary="prometheus",
        version_args=["--version"],
        download_url=_PROMETHEUS_TARBALL,
        download_member=f"prometheus-{PROMETHEUS_VERSION}.linux-amd64/prometheus",
        build=_prometheus_build("prometheus"),
        extra_files={
            "monitoring.coreos.com_servicemonitors.yaml": (
                "github.com/prometheus-operator/prometheus-operator",
                PROMETHEUS_OPERATOR_VERSION,
                "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
            )
        },
    )
)

# promtool from the same module and tags as the prometheus above: `promtool test rules`
# evaluates the chart's alerts (tests/deploy/test_alerts.py) with Prometheus' own rule engine.
TOOLS.append(
    Tool(
        name="promtool",
        version=PROMETHEUS_VERSION,
        binary="promtool",
        version_args=["--version"],
        download_url=_PROMETHEUS_TARBALL,
        download_member=f"prometheus-{PROMETHEUS_VERSION}.linux-amd64/promtool",
        build=_prometheus_build("promtool"),
        # The Prometheus Operator's PrometheusRule CRD checks the chart's rule on a cluster.
        extra_files={
            "monitoring.coreos.com_prometheusrules.yaml": (
                "github.com/prometheus-operator/prometheus-operator",
                PROMETHEUS_OPERATOR_VERSION,
                "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
            )
        },
    )
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}

__all__ = ["TOOLS", "TOOLS_BY_NAME", "GoBuild", "LocalSource", "SourcePatch", "Tool"]
