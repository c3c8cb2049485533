"""The benchmarks' plots are real PNGs of the data they are given."""

from pathlib import Path

import pytest

from bench.plots import capacity_gap_over_time, latency_cdf

pytestmark = pytest.mark.unit

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_latency_cdf_and_the_capacity_gap_are_written_as_png(tmp_path: Path) -> None:
    cdf = latency_cdf(
        {"spotpool": [2.4, 2.6, 2.9], "article loop": [6.1, 7.4, 9.4]},
        tmp_path / "docs" / "cdf.png",
        "3 reclaims",
    )
    gap = capacity_gap_over_time(
        [(0.0, 0), (1.0, 20), (4.5, 12), (9.0, 0)], tmp_path / "gap.png", "storm",
        marks=[(1.0, "reclaim")],
    )  # fmt: skip
    for path in (cdf, gap):
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, path
