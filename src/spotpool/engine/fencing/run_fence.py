"""What a Pulumi run talks through: its cloud calls through the local API proxy and, when
fenced, its backend requests through the fencing S3 proxy, each admitted as this run so that
every request is checked against the run's fence where it leaves the replica (api_proxy.py,
s3_fence.py).

Every run whose calls go through the API proxy signs with placeholder keys of its own, valid
while it runs: the real keys stay in this process. A run outside any fence (by hand, a
preview, a one-writer install) is admitted to nothing else.
"""

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from pathlib import Path

import yaml

from spotpool.engine.fencing import s3_fence
from spotpool.engine.tencent import api_proxy
from spotpool.engine.tencent.write_safety import STACK_VARIABLE

Check = Callable[[], None]


@contextmanager
def admitted(env: Mapping[str, str], cwd: str, check: Check | None) -> Iterator[dict[str, str]]:
    """The environment of one run under `check`, its admissions open while the block lasts."""
    run_env = dict(env)
    with ExitStack() as admissions:
        proxy = api_proxy.proxy_at(run_env.get("HTTP_PROXY"))
        if proxy is not None:
            run_env.update(admissions.enter_context(proxy.issue(run_env)))
            if not run_env.get("TENCENTCLOUD_SECURITY_TOKEN"):
                run_env.pop("TENCENTCLOUD_SECURITY_TOKEN", None)
        run_env.pop(STACK_VARIABLE, None)  # the proxy's (its create journal): not the CLI's
        if check is None:
            yield run_env
            return
        if proxy is not None:
            run_env.update(admissions.enter_context(proxy.admit(check)))
        backend = run_env.get("PULUMI_BACKEND_URL") or project_backend(Path(cwd))
        keys = {**os.environ, **run_env}  # where Pulumi itself would find the real keys
        # Keys from elsewhere (a profile, a web identity) are the CLI's own: left to it.
        if backend.startswith("s3://") and keys.get("AWS_ACCESS_KEY_ID"):
            fence = s3_fence.fence_for(backend, keys)
            run_env.update(admissions.enter_context(fence.admit(check)))
        yield run_env


def project_backend(work_dir: Path) -> str:
    """The backend URL of the project file in a run's directory ('' if none)."""
    path = work_dir / "Pulumi.yaml"
    try:
        return _backend_of(path, path.stat().st_mtime_ns)
    except OSError:
        return ""


@lru_cache(maxsize=1024)
def _backend_of(path: Path, mtime_ns: int) -> str:
    try:
        project = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return ""
    backend = project.get("backend") if isinstance(project, dict) else None
    url = backend.get("url") if isinstance(backend, dict) else None
    return url if isinstance(url, str) else ""
