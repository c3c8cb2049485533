"""GPUs per instance of the Tencent Cloud GPU instance types whose count is known (what a
SpotpoolAccessPolicy's `limits.gpus` counts; a type not listed counts none)."""

GPUS: dict[str, int] = {
    "GN7.2XLARGE32": 1,
    "GN7.5XLARGE80": 1,
    "GN7.10XLARGE160": 2,
    "GN7.20XLARGE320": 4,
    "GN10Xp.2XLARGE40": 1,
    "GN10Xp.5XLARGE100": 2,
    "GN10Xp.10XLARGE200": 4,
    "GN10Xp.20XLARGE320": 8,
    "GT4.4XLARGE96": 1,
    "GT4.8XLARGE192": 2,
    "GT4.20XLARGE474": 4,
    "GT4.41XLARGE948": 8,
}


def gpus_of(instance_type: str | None) -> int | None:
    """GPUs of one instance of the type; None when not known."""
    return GPUS.get(instance_type or "")
