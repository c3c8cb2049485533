"""Slot numbers from the URNs of a pool's instance resources."""

from spotpool.api.notices import SURGE_SUFFIX


def slot_of_urn(urn: str) -> int | None:
    """Slot number from an instance URN (`…::<pool>-slot-<i>`)."""
    name = urn.rsplit("::", 1)[-1]
    head, sep, number = name.rpartition("-slot-")
    return int(number) if sep and head and number.isdigit() else None


def surge_slot_of_urn(urn: str) -> int | None:
    """Slot number from a surge instance's URN (`…::<pool>-slot-<i>-surge`)."""
    return slot_of_urn(urn.removesuffix(SURGE_SUFFIX)) if urn.endswith(SURGE_SUFFIX) else None
