"""Helpers the e2e modules share: operator replicas on one backend (replicas.py), replicas'
Lease loops in threads (leases.py), scenarios more than one module runs (operator_runs.py).
The fixtures built on them are in tests/e2e/conftest.py."""
