"""The engine: one Pulumi stack per Spotpool, driven through the Automation API."""
