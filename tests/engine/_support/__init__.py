"""Helpers the engine modules share (fast_launch.py: pools, configs and checks for the fast
launch path). The fixtures (`world`, `s3_world`) are in tests/engine/conftest.py."""
