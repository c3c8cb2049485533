"""What a killed run or a deletion leaves behind: the repair before the next operation (stale
locks, pending operations, instances created but never recorded), the pure decision over a
pool's orphans, the record of a killed run's pending creates (dead_runs: the proof that a young
instance is a dead run's, kept until an `up` has swept with it), the instances a Retain
deletion keeps, and the sweep of deleted pools' instances: its pure decision (stray_rules), what
the state backend holds (holdings) and the accounts it records for the sweep (accounts).

May import: state, basics, fencing, tencent (the layers of spotpool.engine: pyproject.toml,
[tool.importlinter], checked by `lint-imports`). Outside the engine: spotpool.api and
spotpool.toolchain; never the operator or kopf.
"""
