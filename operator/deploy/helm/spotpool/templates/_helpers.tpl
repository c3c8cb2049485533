{{/*
Names. The app's name is nameOverride, else "spotpool-operator"; object names are
fullnameOverride, else the app's name. The release name is deliberately not part of them: the
name is the operator's identity in the cluster (its ServiceAccount, roles and selector), and an
install renamed by a new release would no longer select its own pods.
*/}}
{{- define "spotpool.name" -}}
{{- default (printf "%s-operator" .Chart.Name) .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spotpool.fullname" -}}
{{- default (include "spotpool.name" .) .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A cluster-wide name two installs in different namespaces do not share. */}}
{{- define "spotpool.clusterName" -}}
{{- printf "%s-%s-%s" (include "spotpool.fullname" .root) .root.Release.Namespace .role }}
{{- end }}

{{/* What selects the operator's pods: never changes with the chart's version. */}}
{{- define "spotpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spotpool.name" . }}
app.kubernetes.io/instance: {{ include "spotpool.fullname" . }}
{{- end }}

{{/* Every object's labels: the selector's, the chart's, then commonLabels (which may add
labels, never replace these). */}}
{{- define "spotpool.labels" -}}
{{- $own := include "spotpool.selectorLabels" . | fromYaml }}
{{- $_ := set $own "app.kubernetes.io/part-of" "spotpool" }}
{{- $_ := set $own "app.kubernetes.io/version" .Chart.AppVersion }}
{{- $_ := set $own "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") }}
{{- $_ := set $own "app.kubernetes.io/managed-by" .Release.Service }}
{{- toYaml (merge $own (.Values.commonLabels | default dict)) }}
{{- end }}

{{/* The pods' labels: the install's (less Helm's own, which would roll the pods on every
chart version), then podLabels and commonLabels (which may add labels, never replace these). */}}
{{- define "spotpool.podLabels" -}}
{{- $own := include "spotpool.selectorLabels" . | fromYaml }}
{{- $_ := set $own "app.kubernetes.io/part-of" "spotpool" }}
{{- $_ := set $own "app.kubernetes.io/version" .Chart.AppVersion }}
{{- toYaml (merge $own (.Values.podLabels | default dict) (.Values.commonLabels | default dict)) }}
{{- end }}

{{- define "spotpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "spotpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* registry/repository, then @digest when one is given, else :tag (default: appVersion). */}}
{{- define "spotpool.image" -}}
{{- $registry := .Values.image.registry | default (.Values.global).imageRegistry }}
{{- $repository := .Values.image.repository }}
{{- if $registry }}{{ $repository = printf "%s/%s" $registry $repository }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/* The default file:// backend lives on the install's own claim. */}}
{{- define "spotpool.fileBackend" -}}
{{- if not .Values.backendUrl }}true{{ end }}
{{- end }}

{{- define "spotpool.noticesUrl" -}}
{{- .Values.notices.url | default (printf "http://%s-notices.%s.svc:%v" (include "spotpool.fullname" .) .Release.Namespace .Values.notices.port) }}
{{- end }}

{{/* What the operator does with Spotpools and what hangs off them, where it serves them. */}}
{{- define "spotpool.poolRules" -}}
- apiGroups: [devops.jokerbai.com]
  resources: [spotpools]
  verbs: [get, list, watch, patch]
- apiGroups: [devops.jokerbai.com]
  resources: [spotpools/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}

{{- define "spotpool.subjects" -}}
- kind: ServiceAccount
  name: {{ include "spotpool.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
