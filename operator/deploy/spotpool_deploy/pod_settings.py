"""The settings Helm charts are expected to have: the image in parts, what a parent chart
shares (`global`), the service account's annotations."""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from spotpool_deploy.model import OMIT_EMPTY, VERSION, Model

PULL_POLICY = Literal["Always", "IfNotPresent", "Never"]


class Image(Model):
    registry: str | None = Field(
        None,
        description="Registry in front of the repository (registry.example.com); None: "
        "global.imageRegistry when a parent chart sets it, else none.",
    )
    repository: str = Field("spotpool-operator", min_length=1, description="Image repository.")
    tag: str = Field(VERSION, min_length=1, description="Image tag (the chart's appVersion).")
    pull_policy: PULL_POLICY = Field("IfNotPresent", description="imagePullPolicy.")

    @model_validator(mode="before")
    @classmethod
    def _reference(cls, value: Any) -> Any:
        """`image: registry.example/spotpool:2`, the form before image was split, still works."""
        if not isinstance(value, str):
            return value
        name, _, tag = value.rpartition(":") if ":" in value.rsplit("/", 1)[-1] else ("", "", "")
        return {"repository": name or value, "tag": tag or "latest"}


class Global(Model):
    """Values a parent chart shares with its subcharts (Helm's `global`); other keys a parent
    sets there are allowed and unused."""

    model_config = ConfigDict(extra="allow")

    image_registry: str | None = Field(
        None, description="Registry of every image, unless image.registry names another."
    )
    image_pull_secrets: Annotated[list[dict[str, str]], OMIT_EMPTY] = Field(
        default_factory=list,
        description="Secrets to pull images with, added to imagePullSecrets ([{name: …}]).",
    )


class ServiceAccount(Model):
    annotations: Annotated[dict[str, str], OMIT_EMPTY] = Field(
        default_factory=dict,
        description="Annotations of the operator's ServiceAccount (e.g. a workload identity).",
    )
