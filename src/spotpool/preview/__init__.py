"""Preview diffs of Spotpool manifests (and of the stack program) for pull requests."""
