"""The Spotpool operator's install: one source for the Pulumi program and the kustomize YAML.

`objects.render(config)` returns every Kubernetes object of an install as a plain dict;
`program` declares them with pulumi-kubernetes and `kustomize` writes them for `kubectl -k`.
"""
