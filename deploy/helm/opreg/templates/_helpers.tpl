{{/*
The app.kubernetes.io/name label: the chart's name unless nameOverride.
*/}}
{{- define "opreg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Object names: the release name, suffixed with the name unless it contains it
(release "opreg" gives "opreg", as in the kustomize base).
*/}}
{{- define "opreg.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Selector labels: app.kubernetes.io/name only, exactly the kustomize base's.
Selectors are immutable, so objects first applied from deploy/kubernetes can
be taken over by a release; the price is nameOverride for a second release in
one Kubernetes namespace (no app.kubernetes.io/instance in the selectors).
*/}}
{{- define "opreg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "opreg.name" . }}
{{- end }}

{{/*
Labels of every object: the selector labels, part-of (the base's
kustomization adds it) and Helm's bookkeeping.
*/}}
{{- define "opreg.labels" -}}
{{ include "opreg.selectorLabels" . }}
app.kubernetes.io/part-of: opreg
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The image: a digest wins over the tag; the tag defaults to appVersion, the
kustomize base's newTag.
*/}}
{{- define "opreg.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}
