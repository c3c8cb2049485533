"""The wrapper go.mod that lets upstream Go tools build from the module proxy."""

import pytest

from spotpool.toolchain.gobuild import GoMod, wrapper_go_mod
from spotpool.toolchain.manifest import GoBuild

pytestmark = pytest.mark.unit


def test_local_replaces_become_published_modules_at_the_required_version() -> None:
    spec = GoBuild(
        module="go.etcd.io/etcd/server/v3", version="v3.6.8", package="go.etcd.io/etcd/server/v3"
    )
    gomod = GoMod.model_validate(
        {
            "Go": "1.24.0",
            "Require": [{"Path": "go.etcd.io/etcd/api/v3", "Version": "v3.6.8"}],
            "Replace": [
                {"Old": {"Path": "go.etcd.io/etcd/api/v3"}, "New": {"Path": "../api"}},
                # a guard against an unwanted dependency: not required, so not copied
                {"Old": {"Path": "go.etcd.io/etcd"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
                {
                    "Old": {"Path": "nhooyr.io/websocket"},
                    "New": {"Path": "github.com/coder/websocket", "Version": "v1.8.7"},
                },
            ],
        }
    )
    text = wrapper_go_mod(spec, "v3.6.8", gomod)
    assert "require go.etcd.io/etcd/server/v3 v3.6.8" in text
    assert "replace go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.8" in text
    assert "replace nhooyr.io/websocket => github.com/coder/websocket v1.8.7" in text
    assert "FORBIDDEN" not in text
    assert "go 1.24.0" in text


def test_placeholder_requirements_take_the_sibling_version() -> None:
    spec = GoBuild(
        module="k8s.io/kubernetes",
        version="v1.36.3",
        package="k8s.io/kubernetes/cmd/kube-apiserver",
        sibling_version="v0.36.3",
    )
    gomod = GoMod.model_validate(
        {
            "Require": [{"Path": "k8s.io/api", "Version": "v0.0.0"}],
            "Replace": [
                {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}}
            ],
        }
    )
    assert "replace k8s.io/api => k8s.io/api v0.36.3" in wrapper_go_mod(spec, "v1.36.3", gomod)


def test_a_recipe_adds_its_requirements_and_its_replaces_win() -> None:
    from spotpool.toolchain.gobuild import RECIPES
    from spotpool.toolchain.manifest import TOOLS_BY_NAME

    spec = TOOLS_BY_NAME["pulumi-resource-tencentcloud"].build
    assert spec is not None and spec.recipe and (RECIPES / spec.recipe / "main.go").exists()
    gomod = GoMod.model_validate(
        {
            "Go": "1.17",
            "Replace": [
                {
                    "Old": {"Path": "github.com/hashicorp/terraform-plugin-sdk/v2"},
                    "New": {
                        "Path": "github.com/hashicorp/terraform-plugin-sdk/v2",
                        "Version": "v9",
                    },
                }
            ],
        }
    )
    text = wrapper_go_mod(spec, spec.version, gomod)
    assert f"require {spec.module} {spec.version}" in text
    assert "require github.com/pulumi/pulumi-terraform-bridge/v3 v3.24.1" in text
    assert "=> github.com/pulumi/terraform-plugin-sdk/v2 v2.0.0-" in text
    assert "v9" not in text


def test_a_stub_stands_in_for_its_module_and_wins_over_upstream_replaces() -> None:
    from spotpool.toolchain.gobuild import RECIPES
    from spotpool.toolchain.manifest import TOOLS_BY_NAME

    spec = TOOLS_BY_NAME["pulumi"].build
    assert spec is not None and spec.stubs
    module, recipe = next(iter(spec.stubs.items()))
    assert list((RECIPES / recipe).glob("*.go"))
    gomod = GoMod.model_validate(
        {"Replace": [{"Old": {"Path": module}, "New": {"Path": module, "Version": "v9"}}]}
    )
    text = wrapper_go_mod(spec, spec.version, gomod)
    assert f"replace {module} => ./stubs/{module.replace('/', '_')}" in text
    assert "v9" not in text
