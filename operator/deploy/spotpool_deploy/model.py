"""What every settings model of an install shares: camelCase names, the version, and the mark
of settings the objects leave out while empty."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

VERSION = "0.1.0"


class Model(BaseModel):
    """camelCase in YAML and Pulumi config (as Kubernetes spells it), snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class OmitWhenEmpty:
    """Marks a setting (a map, a list, an optional value) that the objects leave out while it
    is empty or None, and use whole (a list spliced among their own items) once set: pod
    scheduling, extra arguments, optional flags. The chart guards where it is used."""


OMIT_EMPTY = OmitWhenEmpty()
