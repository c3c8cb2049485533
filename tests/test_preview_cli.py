"""`spotpool preview` as CI reads it: every error exits 1 (2 means "changes"), and the summary
counts instances, not Pulumi resources."""

import pytest
from typer.testing import CliRunner

from spotpool.api.status import Changes
from spotpool.cli import app
from spotpool.engine.basics.results import changes_by_resource
from spotpool.preview import report
from spotpool.preview.run import PoolPreview

pytestmark = pytest.mark.unit

KEYS = ("TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY")


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["preview"], {}, "give --file"),
        (["preview", "-f", "x.yaml"], {"PULUMI_CONFIG_PASSPHRASE": "p"}, "TENCENTCLOUD_SECRET_ID"),
        (["preview", "-f", "x.yaml"], {k: "k" for k in KEYS}, "passphrase"),
        (["preview", "-f", "x.yaml", "--format", "html"], {}, "--format"),
        (["preview", "--no-such-flag"], {}, "No such option"),
    ],
)
def test_usage_and_configuration_errors_exit_1(
    args: list[str], env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*KEYS, "PULUMI_CONFIG_PASSPHRASE", "SPOTPOOL_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 1, result.output
    assert says in result.output


def test_a_replacement_counts_once_and_only_instances_are_counted() -> None:
    steps = [
        ("urn:slot-0", "same"),
        ("urn:slot-1", "create-replacement"),
        ("urn:slot-1", "replace"),
        ("urn:slot-1", "delete-replaced"),
        ("urn:slot-2", "create"),
        ("urn:slot-3", "delete"),
        ("urn:slot-4", "update"),
    ]
    assert changes_by_resource(steps) == Changes(create=1, update=1, replace=1, delete=1, same=1)


def test_the_summary_shows_instances_and_the_details_resources() -> None:
    new_pool = PoolPreview(
        namespace="team-a",
        name="fresh",
        stack="team-a.fresh",
        instances=Changes(create=2),
        changes=Changes(create=4),  # the stack and the component too
        diff="+ pulumi:pulumi:Stack ...",
    )
    markdown = report.to_markdown([new_pool])
    assert "| `team-a/fresh` | `team-a.fresh` | 2 | 0 | 0 | 0 | changes |" in markdown
    assert "Pulumi resources: 4 to create, 0 to update, 0 to replace, 0 to delete" in markdown
    text = report.to_text([new_pool])
    assert "instances 2 to create, 0 to update, 0 to replace, 0 to delete" in text
    assert '"instances": {' in report.to_json([new_pool])
