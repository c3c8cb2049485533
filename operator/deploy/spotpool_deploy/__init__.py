"""The Spotpool operator's install. Its one source is the Helm chart
(operator/deploy/helm/spotpool): `kustomize` renders it for `kubectl apply -k`, `program`
installs it with pulumi-kubernetes' `helm.v4.Chart`.
"""
