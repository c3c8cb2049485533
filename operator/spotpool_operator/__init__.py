"""The Spotpool operator: kopf handlers that keep every Spotpool converged.

It knows kopf and the Kubernetes API, and drives each pool's Pulumi stack through
`spotpool.engine`; the engine knows nothing of it.

Sub-packages, top to bottom, each importing only those below it (replicas and cloud independent
of each other):
- process: One operator process.
- storm: Reclaims and what runs ahead of them.
- convergence: A pool converged through the engine.
- basics: What every pool job speaks.
- replicas: Which replica serves which pool.
- cloud: What the operator reads of the cloud beside the engine.
- reporting: What the operator tells Kubernetes and Prometheus.
"""
