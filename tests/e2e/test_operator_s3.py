"""The operator on a shared S3 backend (versitygw on loopback), as replicas in a cluster use it."""

from collections.abc import Iterator

import pytest

from spotpool.cluster import s3
from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import killed_mid_up_and_replaced_under_another_hostname
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld

pytestmark = pytest.mark.e2e


@pytest.fixture
def s3_world(
    kube: Kube, s3_server: s3.LocalS3, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorWorld]:
    with operator_world(
        kube, tmp_path_factory.mktemp("operator-s3"), backend_url=s3_server.backend_url,
        backend_env=s3_server.env, namespace_prefix="s3-",
    ) as world:  # fmt: skip
        yield world


def test_killed_mid_up_and_replaced_under_another_hostname_on_s3(s3_world: OperatorWorld) -> None:
    killed_mid_up_and_replaced_under_another_hostname(s3_world)
