"""Tencent Cloud error codes, classified in one place, each with what to do about it.

The codes come from the CVM API documentation and the Go SDK's `errors.go` (see
shared/reference/spot-facts.md). A code is matched whole or by its family (the part before the
first dot); an unknown code is `UNKNOWN`, never guessed into a class by substring.
"""

import re
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    NO_STOCK = "NoStock"  # this type and zone has no spot stock now: try another, later again
    QUOTA = "Quota"  # an account limit: raise the quota or lower the pool
    THROTTLED = "Throttled"  # over the API rate limit: back off, never escalate
    AUTH = "AuthFailure"  # the key pair is wrong, expired or not allowed
    INVALID = "InvalidSpec"  # the request is wrong: the spec must change
    TRANSIENT = "Transient"  # the cloud failed: retry with backoff
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class CloudError:
    code: str
    kind: Kind
    advice: str


_NO_STOCK_ADVICE = (
    "no spot stock for this instance type in this zone right now: a slot moves to the next "
    "of spec.instanceTypes when there is one, otherwise the pool retries with backoff; list "
    "more instance types to widen the choice"
)

# Exact codes first; a family entry ("Family.") covers every code under it.
_CODES: dict[str, tuple[Kind, str]] = {
    "ResourceInsufficient.SpecifiedInstanceType": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "ResourceInsufficient.AvailabilityZoneSoldOut": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "ResourceInsufficient.InsufficientOfferingMinimum": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "ResourcesSoldOut.": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "InvalidParameterValue.InsufficientOffering": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "ResourceUnavailable.InstanceType": (Kind.NO_STOCK, _NO_STOCK_ADVICE),
    "LimitExceeded.SpotQuota": (
        Kind.QUOTA,
        "the region's spot quota is used up: raise it in the console or lower the pool's size",
    ),
    "LimitExceeded.UserSpotQuota": (
        Kind.QUOTA,
        "the account's spot quota is used up: raise it in the console or lower the pool's size",
    ),
    "LimitExceeded.SpotpoolOutstandingCreates": (
        Kind.TRANSIENT,
        "creates of a slot whose answers were lost or whose runs failed are not found again "
        "yet: the next operation adopts or terminates what they made before it launches again",
    ),
    "LimitExceeded.": (Kind.QUOTA, "an account limit was reached: raise the quota"),
    "InvalidParameterValue.InsufficientPrice": (
        Kind.INVALID,
        "spec.spotMaxPrice is below the market price: raise it or leave it out",
    ),
    "UnsupportedOperation.NoInstanceTypeSupportSpot": (
        Kind.INVALID,
        "this instance type is not sold as spot: choose another in spec.instanceTypes",
    ),
    "UnsupportedOperation.SpotUnsupportedRegion": (
        Kind.INVALID,
        "spot instances are not sold in this region: choose another spec.region",
    ),
    "RequestLimitExceeded": (
        Kind.THROTTLED,
        "over Tencent Cloud's API rate limit: the operator backs off and tries again",
    ),
    "RequestLimitExceeded.": (
        Kind.THROTTLED,
        "over Tencent Cloud's API rate limit: the operator backs off and tries again",
    ),
    "AuthFailure.": (
        Kind.AUTH,
        "the cloud refused the key pair: check the SecretId/SecretKey in the pool's Secret",
    ),
    "UnauthorizedOperation": (
        Kind.AUTH,
        "the key pair may not do this: grant the sub-account CVM permissions",
    ),
    "UnauthorizedOperation.": (
        Kind.AUTH,
        "the key pair may not do this: grant the sub-account CVM permissions",
    ),
    "InvalidParameter.": (Kind.INVALID, "the cloud rejected a parameter: fix the spec"),
    "InvalidParameterValue.": (Kind.INVALID, "the cloud rejected a value: fix the spec"),
    "MissingParameter": (Kind.INVALID, "a required value is missing: fix the spec"),
    "InvalidZone.MismatchRegion": (
        Kind.INVALID,
        "an availability zone is not in spec.region: fix spec.availabilityZones",
    ),
    "InvalidImageId.": (Kind.INVALID, "spec.imageId is unknown in this region"),
    "InvalidParameter": (Kind.INVALID, "the cloud rejected a parameter: fix the spec"),
    "InvalidParameterValue": (Kind.INVALID, "the cloud rejected a value: fix the spec"),
    "InvalidParameterCombination": (Kind.INVALID, "parameters that cannot go together"),
    "InvalidParameterValue.InstanceTypeNotFound": (
        Kind.INVALID,
        "an instance type in spec.instanceTypes does not exist in this zone: fix it",
    ),
    "InvalidFilter": (Kind.INVALID, "a DescribeInstances filter the API does not know"),
    "InvalidAction": (Kind.INVALID, "the API does not offer this action (or this version)"),
    "InvalidInstanceId.": (Kind.INVALID, "an instance id the cloud does not know"),
    "ResourceNotFound": (Kind.INVALID, "a resource the request names does not exist"),
    "UnsupportedRegion": (Kind.INVALID, "the service is not offered in spec.region"),
    "DryRunOperation": (Kind.TRANSIENT, "a DryRun passed: nothing was created"),
    "InternalError": (Kind.TRANSIENT, "the cloud failed: the operator retries with backoff"),
    "InternalError.": (Kind.TRANSIENT, "the cloud failed: the operator retries with backoff"),
    "InternalServerError": (Kind.TRANSIENT, "the cloud failed: the operator retries with backoff"),
    "ClientNetworkError": (
        Kind.TRANSIENT,
        "the cloud's answer was lost on the way (a reset, a timeout): a create is sent again "
        "only with its ClientToken, and what it made is found again; the operator retries",
    ),
    "ServerNetworkError": (Kind.TRANSIENT, "the cloud answered with an HTTP error: it retries"),
    "ResourceInUse": (Kind.TRANSIENT, "the resource is busy: the operator retries"),
    "ResourceInUse.": (Kind.TRANSIENT, "the resource is busy: the operator retries"),
}

_CODE_PATTERN = re.compile(r"\b([A-Z][A-Za-z]+(?:\.[A-Z][A-Za-z0-9]+)?)\b")


def classify_code(code: str) -> CloudError:
    """The class of one Tencent error code (`ResourceInsufficient.SpecifiedInstanceType`)."""
    if code in _CODES:
        kind, advice = _CODES[code]
        return CloudError(code, kind, advice)
    family = code.split(".", 1)[0] + "."
    if "." in code and family in _CODES:
        kind, advice = _CODES[family]
        return CloudError(code, kind, advice)
    return CloudError(code, Kind.UNKNOWN, "see the cloud's message")


def codes_in(text: str) -> list[CloudError]:
    """Every known error code found in a message (a provider error quotes `Code=…`)."""
    found: dict[str, CloudError] = {}
    for match in _CODE_PATTERN.finditer(text):
        error = classify_code(match.group(1))
        if error.kind is not Kind.UNKNOWN:
            found.setdefault(error.code, error)
    return list(found.values())


def first_of(text: str, kind: Kind) -> CloudError | None:
    return next((e for e in codes_in(text) if e.kind is kind), None)


def is_no_stock(text: str) -> bool:
    """True when `text` (a code or a whole error message) names a no-stock answer."""
    return first_of(text, Kind.NO_STOCK) is not None


def is_throttled(text: str) -> bool:
    return first_of(text, Kind.THROTTLED) is not None
