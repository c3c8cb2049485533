"""The stalling/slowing TCP proxy moved to spotpool.localworld.slow_proxy (the benchmarks use
it too); re-exported here for tests that still import it from this path."""

from spotpool.localworld.slow_proxy import StallProxy, target_of

__all__ = ["StallProxy", "target_of"]
