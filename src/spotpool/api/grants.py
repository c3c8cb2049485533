"""What a SpotpoolAccessPolicy grants besides identities (pure rules, shared by the operator, the
CRD and the docs): which installs may serve its namespaces (`operatorClasses`) and, for pools on
a shared identity — the operator's own, or a role, which other teams may use too — what they may
launch with (`launch`: instance roles, images, VPCs, subnets, security groups, login keys).

Every grant is tri-state, per policy: a field left unset is no opinion; a value (`true`, a list,
even an empty one) is the policy's say. A pool may have a thing when no policy selecting its
namespace that has a say refuses it and at least one grants it: deny by default, and a policy
that only bounds spending (`limits`) grants and refuses nothing. One default keeps single-install
clusters as they were: the install with no class ("") may serve a namespace where no policy
says which installs may.
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from spotpool.api.spec import SpotpoolSpec

DEFAULT_CLASS = ""  # the install started without --operator-class
# An allow-list entry: a name or id, * matching any characters.
ENTRY = Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z0-9_+=,.@*-]{1,128}$")]
# An install's class, or "" for the install with no class.
CLASS_ENTRY = Annotated[str, Field(max_length=40, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")]
MAX_ENTRIES = 100


@dataclass(frozen=True)
class Verdict:
    """The policies' say on one thing: whether one grants it, and the first that refuses it."""

    granted: bool
    refused_by: str | None

    @property
    def allowed(self) -> bool:
        return self.granted and self.refused_by is None


def fold(opinions: Iterable[tuple[str, bool | None]]) -> Verdict:
    """(policy, True: grants | False: refuses | None: no opinion), for one thing."""
    granted, refused_by = False, None
    for name, says in opinions:
        if says is False and refused_by is None:
            refused_by = name
        granted = granted or says is True
    return Verdict(granted, refused_by)


def pattern_matches(pattern: str, value: str) -> bool:
    """`*` matches any characters, the rest literally (case-sensitively)."""
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), value) is not None


def listed(patterns: Sequence[str] | None, value: str) -> bool | None:
    """An allow-list's say on `value`: None with no list, else whether a pattern matches."""
    return None if patterns is None else any(pattern_matches(p, value) for p in patterns)


def _entries(description: str) -> Any:
    return Field(None, max_length=MAX_ENTRIES, description=description)


class LaunchGrants(BaseModel):
    """What pools on a shared identity (useOperatorIdentity, or assumeRole) may launch with;
    each list of names or ids, * matching any characters. Unset: no opinion (with no policy
    granting it, refused)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    instance_roles: list[ENTRY] | None = _entries(
        "CAM roles the instances may assume (spec.camRoleName): an instance role's keys are "
        "readable by whatever runs on the instance."
    )
    images: list[ENTRY] | None = _entries("Images (spec.imageId, spec.imageIds).")
    vpcs: list[ENTRY] | None = _entries("VPCs (spec.vpcId; DEFAULT: the account's default VPC).")
    subnets: list[ENTRY] | None = _entries(
        "Subnets (spec.subnetId, spec.subnetIds; DEFAULT: the default subnet)."
    )
    security_groups: list[ENTRY] | None = _entries("Security groups (spec.securityGroupIds).")
    key_ids: list[ENTRY] | None = _entries("Login key pairs (spec.loginSettings.keyIds).")


@dataclass(frozen=True)
class LaunchField:
    attribute: str  # of LaunchGrants
    what: str  # as a person says it
    spec_path: str  # where the pool names it
    reason: str  # the refusal's condition reason

    @property
    def policy_path(self) -> str:
        return f"launch.{to_camel(self.attribute)}"


LAUNCH_FIELDS = (
    LaunchField("instance_roles", "instance role", "camRoleName", "InstanceRoleNotAllowed"),
    LaunchField("images", "image", "imageId", "ImageNotAllowed"),
    LaunchField("vpcs", "VPC", "vpcId", "VpcNotAllowed"),
    LaunchField("subnets", "subnet", "subnetId", "SubnetNotAllowed"),
    LaunchField("security_groups", "security group", "securityGroupIds", "SecurityGroupNotAllowed"),
    LaunchField("key_ids", "login key", "loginSettings.keyIds", "KeyNotAllowed"),
)


def shared_identity(spec: SpotpoolSpec) -> bool:
    """The pool runs as an identity other namespaces may run as too: the operator's, or a role
    (a Secret's own keys are the namespace's)."""
    return spec.use_operator_identity or spec.assume_role is not None


def launch_values(spec: SpotpoolSpec) -> dict[str, list[str]]:
    """What the pool's spec names to launch its instances with, per LaunchGrants field (the
    admission policy checks the same: imageId and every imageIds value, even one no type uses)."""
    images = {spec.image_id, *(spec.image_ids or {}).values()}
    subnets = {spec.subnet_id, *(spec.subnet_ids or {}).values()}
    keys = spec.login_settings.key_ids if spec.login_settings else None
    return {
        "instance_roles": [spec.cam_role_name] if spec.cam_role_name else [],
        "images": sorted(images),
        "vpcs": [spec.vpc_id],
        "subnets": sorted(subnets),
        "security_groups": sorted(set(spec.security_group_ids or [])),
        "key_ids": sorted(set(keys or [])),
    }


# (reason, message) of a refusal; access.py makes a Refusal of it.
Refused = tuple[str, str]


def class_refusal(
    namespace: str, opinions: Sequence[tuple[str, Sequence[str] | None]], operator_class: str
) -> Refused | None:
    """May the install of `operator_class` serve the namespace, by the operatorClasses of the
    policies selecting it ((policy, its list or None))?"""
    said = [
        (name, None if classes is None else operator_class in classes) for name, classes in opinions
    ]
    verdict = fold(said)
    install = f"operatorClass {operator_class!r}" if operator_class else "the install with no class"
    if verdict.refused_by is not None:
        return (
            "OperatorClassNotAllowed",
            f"SpotpoolAccessPolicy {verdict.refused_by} does not let {install} serve namespace "
            f"{namespace}: set the pool's operatorClass to one the policy's operatorClasses "
            "lists, or ask the cluster admin to add it",
        )
    if verdict.granted or (operator_class == DEFAULT_CLASS and all(s is None for _, s in said)):
        return None
    return (
        "OperatorClassNotAllowed",
        f"no SpotpoolAccessPolicy selecting namespace {namespace} lets {install} serve it "
        "(the default: only the install with no class): ask the cluster admin for a policy "
        f"whose operatorClasses lists {operator_class!r}, or unset the pool's operatorClass",
    )


def launch_refusal(
    namespace: str, grants: Sequence[tuple[str, LaunchGrants | None]], spec: SpotpoolSpec
) -> Refused | None:
    """On a shared identity, may the pool launch with what its spec names, by the launch
    grants of the policies selecting its namespace ((policy, its launch or None))?"""
    if not shared_identity(spec):
        return None
    used = launch_values(spec)
    for field in LAUNCH_FIELDS:
        for value in used[field.attribute]:
            verdict = fold(
                (name, listed(getattr(launch, field.attribute) if launch else None, value))
                for name, launch in grants
            )
            named = f"{field.what} {value} ({field.spec_path})"
            if verdict.refused_by is not None:
                return (
                    field.reason,
                    f"SpotpoolAccessPolicy {verdict.refused_by} does not let namespace "
                    f"{namespace} use {named} on a shared identity: use one its "
                    f"{field.policy_path} lists, or ask the cluster admin to add it",
                )
            if not verdict.granted:
                return (
                    field.reason,
                    f"no SpotpoolAccessPolicy selecting namespace {namespace} grants {named} "
                    "to pools on a shared identity (the operator's, or a role): ask the cluster "
                    f"admin to list it in a policy's {field.policy_path}, or run the pool on "
                    "the namespace's own keys (a credentialsSecretRef, no assumeRole)",
                )
    return None
