"""The Spotpool operator: kopf handlers that keep every Spotpool converged.

It knows kopf and the Kubernetes API, and drives each pool's Pulumi stack through
`spotpool.engine`; the engine knows nothing of it.
"""
