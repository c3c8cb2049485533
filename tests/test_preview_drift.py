"""The PR preview's report tells the drift the pool's last refresh found, in every format."""

import json

import pytest

from spotpool.api.drift import FieldDrift, InstanceDrift
from spotpool.api.status import Changes
from spotpool.preview import report
from spotpool.preview.run import PoolPreview

pytestmark = pytest.mark.unit

DRIFT = InstanceDrift(
    slot=1,
    instance_id="ins-abcdefgh",
    fields=[
        FieldDrift(field="instanceName", desired="team-a-gpu-1", actual="by-hand"),
        FieldDrift(field="tags.owner", desired=None, actual="bob"),
    ],
)


def _preview(drift: list[InstanceDrift]) -> PoolPreview:
    return PoolPreview(
        namespace="team-a", name="gpu", stack="team-a.gpu", changes=Changes(update=1),
        instances=Changes(update=1), diff="~ instanceName", drift=drift,
    )  # fmt: skip


def test_markdown_has_a_row_per_drifted_field() -> None:
    markdown = report.to_markdown([_preview([DRIFT])])
    assert "| 1 | `ins-abcdefgh` | `instanceName` | `team-a-gpu-1` | `by-hand` |" in markdown
    assert "| 1 | `ins-abcdefgh` | `tags.owner` | - | `bob` |" in markdown


def test_text_and_json_tell_it_too() -> None:
    text = report.to_text([_preview([DRIFT])])
    assert "drift at the last refresh: slot 1 (ins-abcdefgh): instanceName" in text
    (pool,) = json.loads(report.to_json([_preview([DRIFT])]))["pools"]
    assert pool["drift"][0]["fields"][1] == {
        "field": "tags.owner",
        "desired": None,
        "actual": "bob",
    }


def test_no_drift_no_drift_section() -> None:
    assert "Drift at the last refresh" not in report.to_markdown([_preview([])])
