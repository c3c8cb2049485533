"""Checking a token bucket from the times of the calls it let through."""


def most_over_bucket(times: list[float], rate: float, burst: float) -> float:
    """The most calls in any window beyond what a (rate, burst) token bucket lets through:
    n calls in [t_i, t_j] need n <= burst + rate * (t_j - t_i). Positive means over; 1 call
    of slack is allowed for the network between the bucket and the emulator's clock."""
    worst = float("-inf")
    for i in range(len(times)):
        for j in range(i, len(times)):
            worst = max(worst, (j - i + 1) - burst - rate * (times[j] - times[i]))
    return worst
