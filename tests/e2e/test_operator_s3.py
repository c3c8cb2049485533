"""The operator on a shared S3 backend (versitygw on loopback), as replicas in a cluster use it."""

from collections.abc import Iterator

import pytest

from spotpool.cluster import s3
from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.e2e.conftest import operator_world
from tests.e2e.test_operator import killed_mid_up_and_replaced_under_another_hostname
from tests.operator.world import OperatorWorld

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def s3_world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    require_tool("versitygw")
    directory = tmp_path_factory.mktemp("operator-s3")
    server = s3.start(directory / "s3")
    try:
        with operator_world(
            kube, directory, backend_url=server.backend_url, backend_env=server.env,
            namespace_prefix="s3-",
        ) as world:  # fmt: skip
            yield world
    finally:
        server.stop()


def test_killed_mid_up_and_replaced_under_another_hostname_on_s3(s3_world: OperatorWorld) -> None:
    killed_mid_up_and_replaced_under_another_hostname(s3_world)
