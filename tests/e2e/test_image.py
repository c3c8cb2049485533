"""The operator image is the product: built by `spotpool image build` (as `make image` does), run
by podman the way the chart's Deployment runs it (container.py reads `helm template`), against
the local kube-apiserver and the emulator.

One operator container for the module: a pool converges, a reclaim is replaced, the `pulumi` in
the image reads the stack, `spotpool --version` answers with the image's revision, and SIGTERM
(`podman stop` with the chart's grace period) stops it in time, leaving no process behind.
"""

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from spotpool.image.build import Image, build, ca_bundle
from spotpool.image.host import RUN_FLAGS
from spotpool.localworld.emulator import EmulatorProcess, wait_until
from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.e2e.container import Pod, pod_from_deployment, podman, podman_ok
from tests.emulator.harness import SECRET_KEY, start_emulator
from tests.operator.world import GONE_STATES, pool_manifest, secret_manifest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
CHART = ROOT / "operator" / "deploy" / "helm" / "spotpool"
RELEASE_NAMESPACE = "image-system"
POOL_NAMESPACE = "image-team"
POOLS = "spotpools.devops.jokerbai.com"
PASSPHRASE = "image-e2e-passphrase"
T = TypeVar("T")


@pytest.fixture(scope="module")
def image() -> Image:
    """The image of this tree: built, or found by its inputs (`make test` built it already)."""
    return build(ROOT, print)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    directory = tmp_path_factory.mktemp("image-cloud")
    process = start_emulator(directory / "cloud.db", directory / "emulator.log", boot_seconds=1)
    yield process
    process.stop()


def helm_template(image: Image, endpoint: str, directory: Path) -> list[dict[str, Any]]:
    repository, _, tag = image.reference.rpartition(":")
    values = directory / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                "watchNamespaces": [POOL_NAMESPACE],
                "cloudEndpoint": endpoint,
            }
        )
    )
    rendered = helm(
        "template",
        "spotpool",
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--values",
        str(values),
    )
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def helm(*args: str) -> str:
    done = subprocess.run(
        [str(require_tool("helm")), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def running(
    kube: Kube,
    image: Image,
    emulator: EmulatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pod]:
    """The chart's objects applied (all but the Deployment: no kubelet here), and its pod run
    by podman from the rendered Deployment."""
    require_tool("kubectl")
    directory = tmp_path_factory.mktemp("image-pod")
    objects = helm_template(image, emulator.endpoint, directory)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image.reference, "the chart runs another image"
    for namespace in (RELEASE_NAMESPACE, POOL_NAMESPACE):
        kube.ok("create", "namespace", namespace)
    # The access admission policy binds cluster-wide: on the kube-apiserver this worker shares
    # it would judge other modules' pools (test_credentials shows it, test_helm installs it).
    skipped = {"Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    others = [o for o in objects if o["kind"] not in skipped]
    kube.ok("apply", "-f", "-", stdin=yaml.safe_dump_all(others))
    passphrase = deployment["spec"]["template"]["spec"]["volumes"]
    secret = next(v["secret"]["secretName"] for v in passphrase if v["name"] == "passphrase")
    kube.ok("-n", RELEASE_NAMESPACE, "create", "secret", "generic", secret,
            f"--from-literal=passphrase={PASSPHRASE}")  # fmt: skip
    kube.ok("-n", POOL_NAMESPACE, "apply", "-f", "-", stdin=json.dumps(secret_manifest()))

    pod = pod_from_deployment(kube, deployment, directory, f"spotpool-image-{directory.name}")
    podman("rm", "--force", pod.name)
    podman_ok(*pod.run_command()[1:])
    try:
        liveness = f"http://127.0.0.1:{pod.ports['liveness']}/healthz"
        wait_until(
            lambda: _answers(liveness) or _exited(pod), "the liveness endpoint", 120, every=1
        )
        assert not _exited(pod), logs(pod)
        yield pod
    finally:
        (directory / "operator.log").write_text(logs(pod))
        podman("rm", "--force", "--time", "0", pod.name)
        kube.run("delete", "namespace", POOL_NAMESPACE, RELEASE_NAMESPACE, "--wait=false")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _exited(pod: Pod) -> bool:
    state = podman("inspect", "--format", "{{.State.Status}}", pod.name).stdout.strip()
    return state in ("exited", "stopped", "")


def logs(pod: Pod) -> str:
    done = podman("logs", pod.name)
    return done.stdout + done.stderr


def _pool(kube: Kube, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        kube.ok("-n", POOL_NAMESPACE, "get", POOLS, name, "-o", "json")
    )
    return found


def _ids(pool: dict[str, Any]) -> list[str]:
    return [i["instanceId"] for i in pool.get("status", {}).get("instances") or []]


def _live(emulator: EmulatorProcess, uid: str) -> set[str]:
    return {
        item["InstanceId"]
        for item in emulator.all_instances()
        if item["InstanceState"] not in GONE_STATES and not item.get("Gone")
        and {"Key": "spotpool-pool-uid", "Value": uid} in (item.get("Tags") or [])
    }  # fmt: skip


def test_the_image_answers_its_version_with_the_revision_it_was_built_from(
    running: Pod, image: Image
) -> None:
    answer = podman_ok("exec", running.name, "spotpool", "--version").strip()
    assert answer.startswith(f"spotpool {image.reference.rpartition(':')[2]} "), answer
    assert f"revision {image.revision}," in answer, answer
    labels = json.loads(
        podman_ok("image", "inspect", "--format", "{{json .Labels}}", image.reference)
    )
    assert labels["org.opencontainers.image.revision"] == image.revision
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    pid1 = podman_ok("exec", running.name, "cat", "/proc/1/cmdline").split("\0")
    assert Path(pid1[0]).name == "tini", pid1


def _certificates(bundle: str) -> set[str]:
    return set(re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END", bundle, re.S))


def _made_up_ca(directory: Path) -> str:
    """A CA certificate of the test's own (PEM): no host has it, no image may carry it."""
    key, cert = directory / "proxy-ca.key", directory / "proxy-ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN=spotpool-test-proxy-ca-{directory.name}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert.read_text()


def _layers_holding(reference: str, certificates: set[str]) -> str:
    """The files of the image (of every directory its layers write) holding one of the
    certificates (a line of each, as grep -F looks for it)."""
    run = ["run", "--rm", "--network", "host", *RUN_FLAGS, "--user", "0", "--entrypoint"]
    needles = [arg for cert in certificates for arg in ("-e", cert.splitlines()[1])]
    where = ["/etc", "/app", "/opt", "/usr", "/var", "/root", "/tmp", "/run"]
    found = podman(*run, "grep", reference, "-rlsF", *needles, *where, timeout=300)
    return found.stdout.strip()


def test_the_proxy_ca_given_to_the_build_is_in_no_layer(
    image: Image, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The build's CA bundle (the host's, with the TLS-inspecting proxy's CA) was a build
    secret: the certificates the image's own bundle lacks are in none of its files. A CA made
    here, planted in a layer on top of the image, is found by the same search (the check can
    fail where the host has no extra CA)."""
    host = Path(ca_bundle(None) or "/etc/ssl/certs/ca-certificates.crt").read_text()
    run = ["run", "--rm", "--network", "host", *RUN_FLAGS, "--user", "0", "--entrypoint"]
    own = podman_ok(*run, "cat", image.reference, "/etc/ssl/certs/ca-certificates.crt")
    extra = _certificates(host) - _certificates(own)
    directory = tmp_path_factory.mktemp("proxy-ca")
    made_up = _certificates(_made_up_ca(directory))
    assert made_up and not made_up & _certificates(own)

    # The control: the made-up CA written into a layer over the image, as a leaking RUN would.
    planted = f"localhost/spotpool-ca-control:{directory.name}".lower()
    container = f"spotpool-ca-control-{directory.name}".lower()
    podman_ok("run", "--name", container, "--network", "host", *RUN_FLAGS, "--user", "0",
              "--volume", f"{directory}:/ca:ro", "--entrypoint", "cp", image.reference,
              "/ca/proxy-ca.pem", "/etc/ssl/certs/proxy-control.pem")  # fmt: skip
    try:
        podman_ok("commit", container, planted, timeout=300)
        assert "/etc/ssl/certs/proxy-control.pem" in _layers_holding(planted, made_up)
    finally:
        podman("rm", "--force", container)
        podman("rmi", "--force", planted)

    found = _layers_holding(image.reference, extra | made_up)
    assert found == "", f"the proxy's CA is in the image: {found}"


def test_a_pool_converges_and_a_reclaim_is_replaced(
    running: Pod, kube: Kube, emulator: EmulatorProcess
) -> None:
    kube.ok("-n", POOL_NAMESPACE, "apply", "-f", "-",
            stdin=json.dumps(pool_manifest("gpu", replicas=2, refreshInterval="10s")))  # fmt: skip

    def ready() -> dict[str, Any] | None:
        pool = _pool(kube, "gpu")
        return pool if pool.get("status", {}).get("readyReplicas") == 2 else None

    pool = wait_until(ready, "the pool to converge", 240, every=1)
    uid = pool["metadata"]["uid"]
    victim, survivor = _ids(pool)
    assert _live(emulator, uid) == {victim, survivor}

    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    def replaced() -> dict[str, Any] | None:
        pool = _pool(kube, "gpu")
        ids = _ids(pool)
        done = victim not in ids and len(ids) == 2 and pool["status"].get("readyReplicas") == 2
        return pool if done else None

    pool = wait_until(replaced, "the reclaimed instance's replacement", 240, every=1)
    assert survivor in _ids(pool) and pool["status"]["reclaims"]["total"] == 1
    assert _live(emulator, uid) == set(_ids(pool))
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{running.ports['metrics']}/metrics").read()
    build_info = re.search(rb"spotpool_build_info\{([^}]*)\} 1\.0", metrics)
    assert build_info and b'revision="' + podman_revision(running).encode() in build_info[1]
    assert SECRET_KEY not in logs(running)


def podman_revision(pod: Pod) -> str:
    return podman_ok("exec", pod.name, "printenv", "SPOTPOOL_REVISION").strip()


def test_pulumi_in_the_image_reads_the_pools_stack(running: Pod, kube: Kube) -> None:
    pool = _pool(kube, "gpu")
    stack = pool["status"]["stack"]["name"]
    script = (
        f"export PULUMI_BACKEND_URL={running.env['SPOTPOOL_BACKEND_URL']}\n"
        f'export PULUMI_CONFIG_PASSPHRASE="$(cat {running.env["SPOTPOOL_PASSPHRASE_FILE"]})"\n'
        "pulumi stack ls --json && echo '---' && "
        f"pulumi stack output --stack {stack} --json instances\n"
    )
    listed, _, outputs = podman_ok("exec", running.name, "sh", "-c", script).partition("---")
    assert stack in {s["name"] for s in json.loads(listed)}
    instances = json.loads(outputs)
    assert {i["instanceId"] for i in instances} == set(_ids(pool)), instances


def test_sigterm_stops_it_within_the_grace_period_leaving_no_process(
    running: Pod, kube: Kube
) -> None:
    # Scale up so that a Pulumi run (the engine, the plugin) is in flight when SIGTERM comes.
    kube.ok("-n", POOL_NAMESPACE, "scale", POOLS, "gpu", "--replicas=3")
    top = wait_until(
        lambda: _plugin_running(running), "the tencentcloud plugin running", 120, every=1
    )
    processes = {int(pid): args for pid, args in _rows(top)}
    started = time.monotonic()
    podman_ok("stop", "--time", str(running.grace_seconds), running.name, timeout=300)
    took = time.monotonic() - started
    print(
        f"podman stop: {took:.1f} s of {running.grace_seconds} s grace, {len(processes)} processes"
    )
    assert took < running.grace_seconds, f"stopped after {took:.0f} s: killed, not stopped"
    code = int(podman_ok("inspect", "--format", "{{.State.ExitCode}}", running.name).strip())
    # 0: the operator stopped itself on SIGTERM (tini passes its exit on); 143 would be a
    # SIGTERM it did not handle, 137 a SIGKILL after the grace period, 1 a crash on the way out.
    assert code == 0, f"exit code {code} after SIGTERM:\n" + logs(running)[-3000:]
    left = {pid: args for pid, args in processes.items() if _cmdline(pid).startswith(args[:15])}
    assert not left, f"still running after the container stopped: {left}"


def _plugin_running(pod: Pod) -> str | None:
    top = podman("top", pod.name, "hpid", "args").stdout
    return top if "pulumi-resource-tencentcloud" in top else None


def _rows(top: str) -> list[tuple[str, str]]:
    """(host pid, command line) of `podman top NAME hpid args`."""
    return [(line.split(None, 1)[0], line.split(None, 1)[1].strip())
            for line in top.splitlines()[1:] if len(line.split(None, 1)) == 2]  # fmt: skip


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
