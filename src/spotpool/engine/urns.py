"""Slot numbers from the URNs of a pool's instance resources."""


def slot_of_urn(urn: str) -> int | None:
    """Slot number from an instance URN (`…::<pool>-slot-<i>`)."""
    name = urn.rsplit("::", 1)[-1]
    head, sep, number = name.rpartition("-slot-")
    return int(number) if sep and head and number.isdigit() else None
