"""The benchmarks' plots, one function each, written as PNG beside the numbers they print.

latency_cdf             reclaim → replacement latencies of several contenders (CDF)
capacity_gap_over_time  missing instances (desired - ready) over a reclaim storm
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def percentile(values: Sequence[float], share: float) -> float:
    """Linear between the closest ranks (numpy's default): p50 is the median, and a plot's
    legend and a benchmark's printed figures agree."""
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_cdf(
    samples: Mapping[str, Sequence[float]],
    path: Path,
    title: str,
    xlabel: str = "reclaim → replacement RUNNING (s)",
) -> Path:
    """One step line per contender: the share of reclaims done within x seconds, with its
    p50 and p95 in the legend and dotted at p95."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    for name, values in samples.items():
        ordered = sorted(values)
        if not ordered:
            continue
        shares = [(n + 1) / len(ordered) for n in range(len(ordered))]
        p50, p95 = percentile(ordered, 0.5), percentile(ordered, 0.95)
        (line,) = axes.step(
            [0.0, *ordered], [0.0, *shares], where="post",
            label=f"{name}: p50 {p50:.1f} s, p95 {p95:.1f} s (n={len(ordered)})",
        )  # fmt: skip
        axes.axvline(p95, color=line.get_color(), linestyle=":", linewidth=1)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("share of reclaims")
    axes.set_ylim(0, 1.02)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    axes.set_title(title, fontsize=9)
    return _save(plt, figure, path)


def capacity_gap_over_time(
    series: Sequence[tuple[float, float]],
    path: Path,
    title: str = "",
    marks: Sequence[tuple[float, str]] = (),
) -> Path:
    """The capacity gap (desired - ready instances, all pools) against seconds since the
    storm began, as a step line with its area filled; `marks` label moments (e.g. the reclaim)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 4), dpi=110)
    times = [t for t, _ in series]
    gaps = [g for _, g in series]
    axes.step(times, gaps, where="post", color="tab:red")
    axes.fill_between(times, gaps, step="post", color="tab:red", alpha=0.2)
    for at, label in marks:
        axes.axvline(at, color="gray", linestyle="--", linewidth=1)
        axes.annotate(label, (at, max(gaps, default=0)), fontsize=8, rotation=90, va="top")
    if series:
        peak = max(gaps)
        note = f"peak {peak:g} missing"
        short = [n for n, g in enumerate(gaps) if g > 0]
        if short and short[-1] + 1 < len(series):  # the gap closed: when it reached 0
            note += f"; closed at {times[short[-1] + 1]:.0f} s"
        axes.text(0.99, 0.95, note, transform=axes.transAxes, ha="right", va="top", fontsize=8)
    axes.set_xlabel("seconds since the reclaims")
    axes.set_ylabel("capacity gap (desired - ready)")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.set_title(title, fontsize=9)
    return _save(plt, figure, path)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
