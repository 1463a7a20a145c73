{{/* The objects' name: the release's, with the chart's unless the release already says it. */}}
{{- define "spec-autotuner.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "spec-autotuner.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spec-autotuner.labels" -}}
{{ include "spec-autotuner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Where the target lives: the Role, its binding and the Lease go there too. */}}
{{- define "spec-autotuner.targetNamespace" -}}
{{- .Values.target.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
k8s://NS/KIND[.VERSION]/NAME[/PART]: PART is the engine container (Deployment, StatefulSet,
LeaderWorkerSet) or the DynamoGraphDeployment's component; without it the tuner finds it.
*/}}
{{- define "spec-autotuner.targetURI" -}}
{{- $t := .Values.target -}}
{{- $word := $t.kind -}}
{{- if $t.version -}}
{{- $word = printf "%s.%s" $t.kind $t.version -}}
{{- end -}}
{{- $uri := printf "k8s://%s/%s/%s" (include "spec-autotuner.targetNamespace" .) $word $t.name -}}
{{- $part := "" -}}
{{- if has $t.kind (list "deployment" "statefulset" "leaderworkerset") -}}
{{- $part = $t.container -}}
{{- else if eq $t.kind "dynamographdeployment" -}}
{{- $part = $t.component -}}
{{- end -}}
{{- if $part -}}
{{- $uri = printf "%s/%s" $uri $part -}}
{{- end -}}
{{- $uri -}}
{{- end -}}

{{/* The settings file: the values above it, then `settings` merged over them. */}}
{{- define "spec-autotuner.settings" -}}
{{- $port := ternary 30000 8000 (eq .Values.engine "sglang") -}}
{{- $url := printf "http://%s.%s.svc:%d/metrics" .Values.target.name (include "spec-autotuner.targetNamespace" .) $port -}}
{{- $settings := dict
  "mode" .Values.mode
  "source" (dict "kind" (.Values.source.kind | default .Values.engine) "urls" (.Values.source.urls | default (list $url)))
  "model" (dict "id" .Values.model.id "gpu" .Values.model.gpu)
  "target" (dict "uri" (include "spec-autotuner.targetURI" .))
  "exporter" (dict "host" "0.0.0.0" "port" 9400)
  "log" (dict "format" "json")
-}}
{{- if ne .Values.engine "vllm" -}}
{{- $_ := set $settings "engine" (dict "kind" .Values.engine) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $settings (deepCopy .Values.settings)) -}}
{{- end -}}

{{/*
The Role's rules, read from the files the kustomize components use (files/ links to deploy/):
the kind's rules (a rule naming an object names the target), the Lease and Events rules of the base
Role (after its two Deployment rules), and a read of each ConfigMap holding engine args.
*/}}
{{- define "spec-autotuner.rules" -}}
{{- $kind := .Values.target.kind -}}
{{- $patch := .Files.Get (printf "files/components/%s/role.yaml" $kind) | fromYamlArray -}}
{{- if not $patch -}}
{{- fail (printf "target.kind %q has no rule set (files/components/%s/role.yaml)" $kind $kind) -}}
{{- end -}}
{{- $rules := list -}}
{{- range $patch -}}
{{- $rule := deepCopy .value -}}
{{- if hasKey $rule "resourceNames" -}}
{{- $_ := set $rule "resourceNames" (list $.Values.target.name) -}}
{{- end -}}
{{- $rules = append $rules $rule -}}
{{- end -}}
{{- $base := .Files.Get "files/rbac/role.yaml" | fromYaml -}}
{{- $rules = concat $rules (slice $base.rules 2) -}}
{{- with .Values.target.argsConfigMaps -}}
{{- $read := $.Files.Get "files/components/args-configmap/role.yaml" | fromYamlArray | first -}}
{{- $rules = append $rules (set (deepCopy $read.value) "resourceNames" .) -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
