"""What the chart tells its user: README.md, NOTES.txt, and the values that only Helm has."""

from typing import Any

CRD_FILE = "crds/devops.jokerbai.com_spotpools.yaml"

# Keys Helm itself puts in a subchart's values: a parent's `condition: spotpool.enabled`.
SCHEMA_EXTRAS: dict[str, Any] = {
    "enabled": {
        "type": "boolean",
        "description": "Read by a parent chart's `condition: spotpool.enabled`; unused here.",
    }
}

README = """\
# Spotpool operator

Keeps pools of Tencent Cloud spot instances (`Spotpool`, `devops.jokerbai.com/v1`) at their
declared size, one Pulumi stack per pool. Generated from `operator/deploy/spotpool_deploy` (the
same source as the kustomization and the Pulumi program): do not edit it, regenerate it with
`spotpool deploy render`. The full guide is docs/deploy.md.

## Install

```sh
kubectl create namespace spotpool-system
kubectl label namespace spotpool-system pod-security.kubernetes.io/enforce=restricted
kubectl -n spotpool-system create secret generic spotpool-passphrase \\
    --from-literal=passphrase="$(openssl rand -base64 32)"   # keep a copy: it decrypts the state
helm install spotpool operator/deploy/helm/spotpool -n spotpool-system \\
    --set image.repository=registry.example.com/spotpool-operator --set image.tag=0.1.0
```

`values.yaml` lists every value with its default; `values.schema.json` rejects a misspelt or
malformed one and names it. Beside the install's own settings the chart has the usual ones:
`image.registry/repository/tag/pullPolicy`, `imagePullSecrets`, `nodeSelector`, `tolerations`,
`affinity`, `priorityClassName`, `podAnnotations`, `podLabels`, `serviceAccount.annotations`,
`resources`, `extraArgs` and `extraEnv` (any flag or variable of `spotpool operator run`), and
the operator's flags by name: `refreshInterval`, `fullRefreshEvery`, `probeBudget`, `avoidFor`,
`operationTimeout`, `leaseDuration`, `apiLimits`, `maxConcurrentPerAccount`, `installId`,
`operatorClass`.

## The CRD

The Spotpool CRD is in `crds/`, so Helm:

- installs it before the templates, and **skips it when the cluster has it already** (applied
  with `kubectl apply -f crds/`, or by another release): `helm install` works there too;
- **never deletes it** on `helm uninstall` (deleting a CRD deletes every Spotpool, and the
  finalizers would leave their cloud instances unmanaged);
- **never upgrades it**: `helm upgrade` leaves the cluster's CRD as it is.

So a chart upgrade whose CRD changed (CHANGELOG.md says so) takes one step before
`helm upgrade`, with the new chart's CRD:

```sh
kubectl apply --server-side --force-conflicts -f operator/deploy/helm/spotpool/crds/
# or, from a packaged chart:
helm show crds spotpool-0.1.0.tgz | kubectl apply --server-side --force-conflicts -f -
helm upgrade spotpool operator/deploy/helm/spotpool -n spotpool-system --reuse-values
```

`--server-side --force-conflicts` takes the fields over from whoever applied the CRD first
(Helm's create, or a client-side `kubectl apply`) and has no annotation-size limit. A CRD the
cluster manages elsewhere: `helm install --skip-crds`.

A release made from an earlier chart, whose CRD was one of its templates, would lose the CRD
(and every Spotpool with it) on `helm upgrade` to this chart. Keep it first, then upgrade
(docs/upgrading.md; `image` is now a map):

```sh
kubectl annotate crd spotpools.devops.jokerbai.com helm.sh/resource-policy=keep
```

## As a subchart

```yaml
# the parent's Chart.yaml
dependencies:
  - name: spotpool
    version: 0.1.0
    repository: file://../spotpool      # or wherever the chart is published
    condition: spotpool.enabled
# the parent's values.yaml
global:
  imageRegistry: registry.example.com   # in front of image.repository unless image.registry
  imagePullSecrets: [{name: regcred}]   # added to imagePullSecrets
spotpool:
  enabled: true
  watchNamespaces: [team-a]
```

Object names come from `name` (default `spotpool-operator`), not from the release name, and
the operator runs in the release's namespace. `global` may hold other keys (other subcharts').
The parent's own `crds/` handling applies: Helm installs a subchart's `crds/` with the parent.
"""

NOTES = """\
Spotpool operator {{ .Chart.AppVersion }} installed in {{ .Release.Namespace }}.
{{- if .Values.watchNamespaces }}
It serves the Spotpools of: {{ join ", " .Values.watchNamespaces }}.
{{- else }}
It serves the Spotpools of every namespace.
{{- end }}

The pod waits for the stacks' passphrase Secret. Create it once, and keep a copy
(it decrypts the state):

  kubectl -n {{ .Release.Namespace }} create secret generic {{ .Values.passphraseSecret.name }} \\
      --from-literal={{ .Values.passphraseSecret.key }}="$(openssl rand -base64 32)"

The Spotpool CRD comes from the chart's crds/: Helm keeps it on uninstall and never upgrades
it. When a new chart version changes it, apply it before `helm upgrade`:

  helm show crds <chart> | kubectl apply --server-side --force-conflicts -f -
"""
