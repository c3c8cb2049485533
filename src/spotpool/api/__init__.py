"""The Spotpool API: pure data and rules (no Pulumi, no kopf, no I/O)."""
