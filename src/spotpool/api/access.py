"""`devops.jokerbai.com/v1` `SpotpoolAccessPolicy`: what the cluster admin lets the pools of some
namespaces spend (pure data and rules, shared by the operator, the CRD and the chart's
admission policy).

A policy selects namespaces (by name or label selector) and says, for the pools there: whether
they may run as the operator's own identity; which roles (ARN patterns) and accounts they may
assume, and the external id to send; which regions; which Secrets they may use without the
Secret opting in; and limits per namespace (instances, GPUs, hourly cost).

Policies combine like ResourceQuotas: **every** policy that selects a namespace applies there.
Grants are tri-state (spotpool.api.grants): a field a policy leaves unset is no opinion, so a
pool needs one policy granting a thing and none refusing it, and a policy that only sets limits
grants and refuses nothing (an admission policy, which sees one policy at a time, refuses what a
policy's say refuses; the operator also refuses what no policy grants). A namespace no policy
selects gets the defaults: Secrets of its own namespace that opt in, no operator identity, no
role, the install with no class.
"""

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from spotpool.api.grants import (
    CLASS_ENTRY,
    MAX_ENTRIES,
    LaunchGrants,
    class_refusal,
    fold,
    launch_refusal,
    pattern_matches,
)
from spotpool.api.identity import role_account
from spotpool.api.reservations import Reservation, Reserved
from spotpool.api.spec import SpotpoolSpec

ACCESS_KIND = "SpotpoolAccessPolicy"
ACCESS_PLURAL = "spotpoolaccesspolicies"
# A Secret opts in to being used by Spotpools with this label or annotation set to "true".
CONSENT_KEY = "spotpool.devops.jokerbai.com/usable"
# qcs::cam::uin/<account or *>:roleName/<name, * matching any characters>
ROLE_PATTERN = r"^qcs::cam::uin/([0-9]{5,20}|\*):roleName/[A-Za-z0-9+=,.@_*-]{1,128}$"
ACCOUNT = r"^[0-9]{5,20}$"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SelectorRequirement(_Model):
    key: str = Field(max_length=317, description="The label's key.")
    operator: str = Field(
        pattern=r"^(In|NotIn|Exists|DoesNotExist)$",
        description="In, NotIn, Exists or DoesNotExist (as in a Kubernetes label selector).",
    )
    values: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list,
        max_length=64,
        description="The values (In, NotIn); empty for the others.",
    )


class LabelSelector(_Model):
    """A Kubernetes label selector over the namespaces' labels."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        max_length=32,
        description="Labels a namespace must carry, all of them.",
    )
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list,
        max_length=16,
        description="Requirements a namespace's labels must meet, all.",
    )


class Namespaces(_Model):
    """Which namespaces the policy speaks for: those named, and those the selector matches."""

    names: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=1000, description="Namespaces by name."
    )
    selector: LabelSelector | None = Field(
        None,
        description="Namespaces by label (matchLabels, matchExpressions); {} matches every "
        "namespace.",
    )


class Limits(_Model):
    """Bounds per namespace, over all its pools (each unset: no bound)."""

    instances: int | None = Field(None, ge=0, description="Instances, all pools together.")
    gpus: int | None = Field(
        None,
        ge=0,
        description="GPUs, each instance counted by the cloud's own data for its type "
        "(DescribeZoneInstanceConfigInfos' Gpu); a pool of a type whose count is not known "
        "does not grow under this limit.",
    )
    hourly_cost: float | None = Field(
        None,
        ge=0,
        description="What the namespace's instances may cost an hour, in the account's "
        "currency: each launch priced before it is made at the dearest quote of its pool's "
        "zones and types (on-demand where it may run on demand); a pool whose price is not "
        "known does not grow under this limit.",
    )


class AccessPolicySpec(_Model):
    namespaces: Namespaces = Field(description="The namespaces this policy applies to.")
    operator_identity: bool | None = Field(
        None,
        description="true: pools there may run as the operator's own cloud identity "
        "(useOperatorIdentity) and assume roles with it; false: they may not, whatever other "
        "policies grant; unset: no opinion (with no policy granting it, refused).",
    )
    operator_classes: list[CLASS_ENTRY] | None = Field(
        None,
        max_length=MAX_ENTRIES,
        description='The installs (spec.operatorClass; "" for the install with no class) that '
        "may serve pools there. Unset: no opinion; where no policy says, only the install with "
        "no class.",
    )
    roles: list[Annotated[str, Field(max_length=200, pattern=ROLE_PATTERN)]] | None = Field(
        None,
        max_length=100,
        description="Roles pools there may assume (spec.assumeRole.roleArn), as ARN patterns: "
        "qcs::cam::uin/<account>:roleName/<name>, where * matches any characters. With "
        "accounts, the policy's say on roles: a role neither lists is refused; both unset: no "
        "opinion.",
    )
    accounts: list[Annotated[str, Field(max_length=20, pattern=ACCOUNT)]] | None = Field(
        None,
        max_length=100,
        description="Accounts (uins) any of whose roles pools there may assume.",
    )
    launch: LaunchGrants | None = Field(
        None,
        description="What pools there on a shared identity (useOperatorIdentity, or "
        "assumeRole) may launch with: instance roles, images, VPCs, subnets, security groups, "
        "login keys. A value no policy lists is refused; unset: no opinion.",
    )
    external_id: str | None = Field(
        None,
        min_length=2,
        max_length=128,
        description="The external id sent when a pool there assumes a role (the role's trust "
        "policy asks for it: sts:external_id). A pool's spec.assumeRole.externalId is never sent.",
    )
    regions: list[Annotated[str, Field(max_length=32)]] | None = Field(
        None, max_length=64, description="Regions pools there may use; unset: every region."
    )
    secrets: list[Annotated[str, Field(max_length=253)]] | None = Field(
        None,
        max_length=100,
        description="Secrets (names, * matching any characters) pools there may use although "
        f"they do not opt in (a Secret opts in with the label or annotation {CONSENT_KEY}: "
        '"true"). Unset: no opinion.',
    )
    limits: Limits | None = Field(None, description="Bounds per namespace.")


class NamespaceUse(_Model):
    namespace: str
    pools: int = 0
    instances: int = 0
    gpus: int = 0
    hourly_cost: float = 0.0
    held: int = Field(0, description="Pools held below their desired count by a limit.")


class AccessPolicyStatus(_Model):
    """What the pools of the selected namespaces use now (the operator writes it)."""

    namespaces: int = Field(0, description="Namespaces the policy selects that have pools.")
    pools: int = Field(0, description="Pools in the selected namespaces.")
    instances: int = Field(0, description="Their instances, all namespaces together.")
    gpus: int = Field(0, description="Their GPUs (of instance types whose count is known).")
    hourly_cost: float = Field(0.0, description="What they cost an hour, together.")
    held: int = Field(0, description="Pools held below their desired count by a limit.")
    busiest: str | None = Field(
        None, description="The namespace nearest to a limit (instances, then cost)."
    )
    usage: list[NamespaceUse] = Field(default_factory=list, description="Per namespace.")
    problem: str | None = Field(
        None,
        description="Why the operator does not understand this policy: it then refuses every "
        "pool of the namespaces it may select, and holds what they run (unset: understood).",
    )
    reserved: Reserved = Field(
        default_factory=Reserved,
        description="What the pools reserved against the limits, all namespaces together.",
    )
    reservations: dict[str, Reservation] = Field(
        default_factory=dict,
        description="The ledger: each pool's reservation by its uid, written by the operator "
        "before any launch (resourceVersion checked); a retained pool's stays until the "
        "cluster admin removes it.",
    )


@dataclass(frozen=True)
class NamedPolicy:
    name: str
    spec: AccessPolicySpec
    problem: str | None = None  # not understood (a newer schema?): refuses and holds all

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        chosen = self.spec.namespaces
        if namespace in chosen.names:
            return True
        return chosen.selector is not None and matches(chosen.selector, labels)


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for rule in selector.match_expressions:
        present = rule.key in labels
        if rule.operator == "In" and not (present and labels[rule.key] in rule.values):
            return False
        if rule.operator == "NotIn" and present and labels[rule.key] in rule.values:
            return False
        if rule.operator == "Exists" and not present:
            return False
        if rule.operator == "DoesNotExist" and present:
            return False
    return True


def role_matches(pattern: str, role_arn: str) -> bool:
    """An ARN pattern: * matches any characters (the rest literally, case-sensitively)."""
    return pattern_matches(pattern, role_arn)


def consents(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    """A Secret opts in to Spotpool with the label or annotation CONSENT_KEY: "true"."""
    return "true" in (labels.get(CONSENT_KEY), annotations.get(CONSENT_KEY))


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True)
class Access:
    """What the policies selecting one namespace allow its pools (none: the defaults)."""

    namespace: str
    policies: Sequence[NamedPolicy]

    @classmethod
    def of(
        cls, namespace: str, labels: Mapping[str, str], policies: Sequence[NamedPolicy]
    ) -> "Access":
        chosen = sorted((p for p in policies if p.selects(namespace, labels)), key=_by_name)
        return cls(namespace, chosen)

    def _none(self, what: str) -> str:
        return (
            f"no SpotpoolAccessPolicy selects namespace {self.namespace}, so {what} is refused "
            "(the default): ask the cluster admin for a policy that selects the namespace and "
            "grants it"
        )

    def operator_identity(self) -> Refusal | None:
        if not self.policies:
            return Refusal("OperatorIdentityNotAllowed", self._none("the operator's identity"))
        verdict = fold((p.name, p.spec.operator_identity) for p in self.policies)
        if verdict.refused_by is not None:
            return Refusal(
                "OperatorIdentityNotAllowed",
                f"SpotpoolAccessPolicy {verdict.refused_by} does not let namespace "
                f"{self.namespace} use the operator's identity (its operatorIdentity: false): "
                "give the pool a credentialsSecretRef, or ask the cluster admin",
            )
        if not verdict.granted:
            return Refusal(
                "OperatorIdentityNotAllowed",
                f"no SpotpoolAccessPolicy selecting namespace {self.namespace} grants the "
                "operator's identity: ask the cluster admin for one with operatorIdentity: "
                "true, or give the pool a credentialsSecretRef",
            )
        return None

    def role(self, role_arn: str) -> Refusal | None:
        if not self.policies:
            return Refusal("RoleNotAllowed", self._none(f"role {role_arn}"))
        account = role_account(role_arn)
        verdict = fold((p.name, _role_say(p.spec, account, role_arn)) for p in self.policies)
        if verdict.refused_by is not None:
            return Refusal(
                "RoleNotAllowed",
                f"SpotpoolAccessPolicy {verdict.refused_by} does not let namespace "
                f"{self.namespace} assume role {role_arn}: add it to the policy's roles "
                f"(or account {account} to its accounts), or use a role it lists",
            )
        if not verdict.granted:
            return Refusal(
                "RoleNotAllowed",
                f"no SpotpoolAccessPolicy selecting namespace {self.namespace} grants role "
                f"{role_arn}: ask the cluster admin to list it in a policy's roles (or account "
                f"{account} in its accounts)",
            )
        return None

    def operator_class(self, name: str) -> Refusal | None:
        """May the install of class `name` ("": the install with no class) serve the pools?"""
        opinions = [(p.name, p.spec.operator_classes) for p in self.policies]
        found = class_refusal(self.namespace, opinions, name)
        return Refusal(*found) if found else None

    def launch(self, spec: SpotpoolSpec) -> Refusal | None:
        """May the pool launch with what its spec names (on a shared identity: the grants)?"""
        found = launch_refusal(
            self.namespace, [(p.name, p.spec.launch) for p in self.policies], spec
        )
        return Refusal(*found) if found else None

    def external_id(self) -> str | Refusal | None:
        """The external id to send with AssumeRole: the policies', never the spec's."""
        ids = {p.name: p.spec.external_id for p in self.policies if p.spec.external_id}
        if len(set(ids.values())) > 1:
            return Refusal(
                "PolicyConflict",
                f"the SpotpoolAccessPolicies {', '.join(sorted(ids))} selecting namespace "
                f"{self.namespace} set different externalIds: keep one",
            )
        return next(iter(ids.values()), None)

    def region(self, region: str) -> Refusal | None:
        for policy in self.policies:
            allowed = policy.spec.regions
            if allowed is not None and region not in allowed:
                return Refusal(
                    "RegionNotAllowed",
                    f"SpotpoolAccessPolicy {policy.name} does not let namespace "
                    f"{self.namespace} use region {region}: use one of "
                    f"{', '.join(allowed) or '(none)'}, or add it to the policy's regions",
                )
        return None

    def secret_allowed(self, name: str) -> bool:
        """A Secret that does not opt in is usable only when a policy here lists it and no
        policy with a `secrets` list leaves it out."""
        return fold(
            (p.name, None if p.spec.secrets is None else _any_match(p.spec.secrets, name))
            for p in self.policies
        ).allowed

    def limits(self) -> list[tuple[str, Limits]]:
        return [(p.name, p.spec.limits) for p in self.policies if p.spec.limits is not None]

    def not_understood(self) -> Refusal | None:
        """A policy selecting the namespace that this operator does not understand refuses
        every pool there (and holds what they run): it may refuse or limit what is asked."""
        for policy in self.policies:
            if policy.problem is not None:
                return Refusal(
                    "PolicyNotUnderstood",
                    f"SpotpoolAccessPolicy {policy.name} selects namespace {self.namespace} "
                    f"and this operator does not understand it ({policy.problem}): upgrade the "
                    "operator, or ask the cluster admin to fix the policy",
                )
        return None


def _by_name(policy: NamedPolicy) -> str:
    return policy.name


def _role_say(spec: AccessPolicySpec, account: str, role_arn: str) -> bool | None:
    """A policy's say on a role: None when it sets neither roles nor accounts."""
    if spec.roles is None and spec.accounts is None:
        return None
    return account in (spec.accounts or []) or any(
        role_matches(p, role_arn) for p in spec.roles or []
    )


def _any_match(patterns: Sequence[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class Use:
    """What a pool uses (or another pool of its namespace takes): instances, GPUs, cost."""

    instances: int = 0
    gpus: int = 0
    hourly_cost: float = 0.0


@dataclass(frozen=True)
class Hold:
    count: int  # the count the pool may have now
    message: str  # why it is held ("" when not held)


def policy_status(
    policy: NamedPolicy,
    labels: Mapping[str, Mapping[str, str]],
    pools: Sequence[tuple[str, Use, bool]],
) -> AccessPolicyStatus:
    """What the pools of the namespaces `policy` selects use: `labels` is every namespace's
    labels, `pools` each pool's (namespace, use, held by a limit)."""
    per: dict[str, NamespaceUse] = {}
    for namespace, use, held in pools:
        if not policy.selects(namespace, labels.get(namespace, {})):
            continue
        row = per.setdefault(namespace, NamespaceUse(namespace=namespace))
        row.pools += 1
        row.instances += use.instances
        row.gpus += use.gpus
        row.hourly_cost = round(row.hourly_cost + use.hourly_cost, 6)
        row.held += int(held)
    rows = sorted(per.values(), key=lambda r: r.namespace)
    limits = policy.spec.limits or Limits()

    def nearness(row: NamespaceUse) -> tuple[float, float]:
        return (
            row.instances / limits.instances if limits.instances else 0.0,
            row.hourly_cost / limits.hourly_cost if limits.hourly_cost else 0.0,
        )

    busiest = max(rows, key=nearness).namespace if rows else None
    return AccessPolicyStatus(
        namespaces=len(rows),
        pools=sum(r.pools for r in rows),
        instances=sum(r.instances for r in rows),
        gpus=sum(r.gpus for r in rows),
        hourly_cost=round(sum(r.hourly_cost for r in rows), 6),
        held=sum(r.held for r in rows),
        busiest=busiest,
        usage=rows,
    )
