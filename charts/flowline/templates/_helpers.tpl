{{/* Names, labels and the pieces both Deployments share. */}}

{{- define "flowline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-flowline, or the release name alone when it already holds the chart name.
Kept to 52 characters so that suffixes such as "-controller" still fit in 63. */}}
{{- define "flowline.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "flowline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flowline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object: the chart's, then commonLabels, which may replace the
chart's informational ones (helm.sh/chart, app.kubernetes.io/version, managed-by,
part-of) but not the selector labels. */}}
{{- define "flowline.labels" -}}
{{- include "flowline.labelLines" . | trim }}
{{- end }}

{{- define "flowline.labelLines" -}}
{{- $common := include "flowline.commonLabels" . | fromYaml }}
{{- if not (hasKey $common "helm.sh/chart") }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
{{ include "flowline.selectorLabels" . }}
{{- if not (hasKey $common "app.kubernetes.io/version") }}
app.kubernetes.io/version: {{ include "flowline.tag" . | quote }}
{{- end }}
{{- if not (hasKey $common "app.kubernetes.io/managed-by") }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- if not (hasKey $common "app.kubernetes.io/part-of") }}
app.kubernetes.io/part-of: flowline
{{- end }}
{{- with $common }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* commonLabels, checked: the selector labels, and the labels templates add
(flowline.io/, the aggregation labels), are the chart's. */}}
{{- define "flowline.commonLabels" -}}
{{- range $key, $value := .Values.commonLabels }}
{{- if or (has $key (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component")) (hasPrefix "flowline.io/" $key) (hasPrefix "rbac.authorization.k8s.io/" $key) }}
{{- fail (printf "commonLabels may not set %s: the chart sets it" $key) }}
{{- end }}
{{- end }}
{{- with .Values.commonLabels }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* The settings of one component (controller or api); call with (dict "root" $
"component" "api"). */}}
{{- define "flowline.serviceAccountName" -}}
{{- dig "serviceAccount" "name" "" (index .root.Values .component) | default (printf "%s-%s" (include "flowline.fullname" .root) .component) }}
{{- end }}

{{- define "flowline.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The image of every pod and of step Jobs: pinned by digest when one is given. */}}
{{- define "flowline.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "flowline.tag" .) }}
{{- end }}
{{- end }}

{{/* The pod template's metadata of a Deployment; call with (dict "root" $
"component" "api"). Labels: commonLabels, podLabels, then <component>.podLabels, each
winning over the ones before; none may replace the selector's. Annotations:
podAnnotations, then <component>.podAnnotations. */}}
{{- define "flowline.podMetadata" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .component -}}
{{- range $source, $map := dict "podLabels" $root.Values.podLabels (printf "%s.podLabels" .component) $c.podLabels }}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" }}
{{- if hasKey ($map | default dict) $key }}
{{- fail (printf "%s may not set %s: the Deployments select their pods by it" $source $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $labels := mergeOverwrite (include "flowline.commonLabels" $root | fromYaml) ($root.Values.podLabels | default dict) ($c.podLabels | default dict) }}
{{- $annotations := mergeOverwrite (dict) ($root.Values.podAnnotations | default dict) ($c.podAnnotations | default dict) -}}
labels:
  {{- include "flowline.selectorLabels" $root | nindent 2 }}
  app.kubernetes.io/component: {{ .component }}
  {{- with $labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The PodDisruptionBudget of a Deployment; call with (dict "root" $ "component" "api"). */}}
{{- define "flowline.pdb" -}}
{{- if .root.Values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "flowline.fullname" .root }}-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "flowline.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ .root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "flowline.selectorLabels" .root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{/* The namespace of the bootstrap admin key (its account). */}}
{{- define "flowline.adminKeyNamespace" -}}
{{- .Values.bootstrapAdminKey.namespace | default .Release.Namespace }}
{{- end }}

{{/* Flags of both processes (`flowline api --help`; `flowline operator` takes them
too): both serve the listed namespaces only in namespaced mode; the API checks new
webhooks' URLs with --allow-http and the controller delivers with it;
--default-executor is the controller's default executor, and in the API's set for
its write-time checks of workflows' steps. */}}
{{- define "flowline.args" -}}
- --listen=0.0.0.0:8080
- --seal-key-secret={{ include "flowline.sealKeySecret" . }}
- --log-format={{ .Values.config.logFormat }}
- --default-executor={{ .Values.config.defaultExecutor }}
{{- if .Values.config.allowHttp }}
- --allow-http
{{- end }}
{{- with .Values.otlp.endpoint }}
- --otlp-endpoint={{ . }}
{{- end }}
{{- with .Values.watchNamespaces }}
{{- /* Namespaced mode: watches, caches and controllers only in these namespaces. */}}
- --watch-namespace={{ join "," . }}
{{- end }}
{{- end }}

{{/* Flags of the API alone: the accounts' rate-limit plans, the budget of requests
without a valid key, the proxies whose X-Forwarded-For names the client, and whether
the console is served. */}}
{{- define "flowline.apiArgs" -}}
- --default-plan={{ .Values.config.defaultPlan }}
- --enterprise-requests-per-minute={{ .Values.config.enterpriseRequestsPerMinute | int }}
{{- if not .Values.console.enabled }}
- --no-console
{{- end }}
- --unauthenticated-requests-per-minute={{ .Values.api.unauthenticatedRequestsPerMinute | int }}
{{- range .Values.api.trustedProxies }}
- --trusted-proxy={{ . }}
{{- end }}
{{- end }}

{{/* Flags of the controller alone (`flowline api` refuses them): no /v1 (the API
Deployment serves it, and the controller then holds no API watch caches), the
leader-election Lease, the step Jobs, and webhook deliveries. */}}
{{- define "flowline.deliveryArgs" -}}
- --no-api
- --leader-election-lease={{ include "flowline.fullname" . }}-controller
- --shards={{ .Values.controller.shards | int }}
{{- if gt (int .Values.controller.shards) 1 }}
- --member-slots={{ include "flowline.memberSlots" . }}
{{- end }}
- --max-runs-per-account={{ .Values.controller.maxRunsPerAccount | int }}
- --max-running-runs={{ .Values.controller.maxRunningRuns | int }}
- --max-step-attempts={{ .Values.controller.maxStepAttempts | int }}
{{- /* Step Jobs of built-in actions run `flowline step` from this same image. */}}
- --step-image={{ include "flowline.image" . }}
{{- with .Values.controller.stepResources }}
- --step-cpu-request={{ .requests.cpu }}
- --step-memory-request={{ .requests.memory }}
- --step-cpu-limit={{ .limits.cpu }}
- --step-memory-limit={{ .limits.memory }}
{{- end }}
- --step-job-ttl={{ .Values.controller.stepJobTtlSeconds | int }}
- --public-url={{ include "flowline.publicUrl" . }}
- --event-retention={{ .Values.controller.eventRetention }}
- --delivery-concurrency={{ .Values.delivery.concurrency | int }}
{{- range .Values.delivery.allowCidrs }}
- --allow-cidr={{ . }}
{{- end }}
{{- with .Values.delivery.caBundle.configMap }}
- --ca-bundle={{ include "flowline.caBundleDir" $ }}/{{ $.Values.delivery.caBundle.key }}
{{- end }}
{{- end }}

{{/* Where the ConfigMap of delivery.caBundle is mounted in the controller pods. */}}
{{- define "flowline.caBundleDir" -}}
/etc/flowline/ca
{{- end }}

{{/* The pod spec both Deployments share; call with (dict "root" $ "component" "api"),
plus "delivers" true for the controller (delivery flags and the CA bundle mount).
Pod settings: the component's (controller.*, api.*) when set, else the shared ones. */}}
{{- define "flowline.podSpec" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .component -}}
# Each process its own ServiceAccount (rbac.yaml): the API's may not run Jobs.
serviceAccountName: {{ include "flowline.serviceAccountName" . }}
{{- with $c.priorityClassName | default $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.podSecurityContext | default $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
- name: {{ .component }}
  image: {{ include "flowline.image" $root | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
  - {{ .subcommand }}
  {{- include "flowline.args" $root | nindent 2 }}
  {{- if .delivers }}
  {{- include "flowline.deliveryArgs" $root | nindent 2 }}
  {{- else }}
  {{- include "flowline.apiArgs" $root | nindent 2 }}
  {{- end }}
  {{- with $root.Values.extraArgs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- /* controller.extraArgs or api.extraArgs: flags only that process accepts. */}}
  {{- with (index $root.Values .component).extraArgs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  env:
  - name: RUST_LOG
    value: {{ $root.Values.config.logLevel | quote }}
  # Where the controllers' leader-election Lease lives.
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef: {fieldPath: metadata.namespace}
  {{- with $root.Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  ports:
  - name: http
    containerPort: 8080
    protocol: TCP
  # probes.*: the listener opens once the CRDs are Established; ready once every watch
  # cache has listed.
  startupProbe:
    httpGet: {path: /healthz, port: http}
    {{- toYaml $root.Values.probes.startup | nindent 4 }}
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    {{- toYaml $root.Values.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet: {path: /readyz, port: http}
    {{- toYaml $root.Values.probes.readiness | nindent 4 }}
  resources:
    {{- toYaml .resources | nindent 4 }}
  {{- with $c.securityContext | default $root.Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $caBundle := and .delivers $root.Values.delivery.caBundle.configMap }}
  {{- if or $caBundle $root.Values.extraVolumeMounts }}
  volumeMounts:
  {{- if $caBundle }}
  - name: ca-bundle
    mountPath: {{ include "flowline.caBundleDir" $root }}
    readOnly: true
  {{- end }}
  {{- with $root.Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- end }}
{{- if or $caBundle $root.Values.extraVolumes }}
volumes:
{{- if $caBundle }}
- name: ca-bundle
  configMap:
    name: {{ $root.Values.delivery.caBundle.configMap }}
    items:
    - {key: {{ $root.Values.delivery.caBundle.key | quote }}, path: {{ $root.Values.delivery.caBundle.key | quote }}}
{{- end }}
{{- with $root.Values.extraVolumes }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
{{- with $c.nodeSelector | default $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations | default $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity | default $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* A constraint without a labelSelector counts this component's pods. */}}
{{- $selector := include "flowline.selectorLabels" $root | fromYaml }}
{{- $_ := set $selector "app.kubernetes.io/component" .component }}
{{- $spread := list }}
{{- range $c.topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not $constraint.labelSelector }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $spread = append $spread $constraint }}
{{- end }}
{{- with $spread }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The egress rules both Deployments' pods get with networkPolicy.egress.enabled:
DNS, the Kubernetes API server, and extraRules. */}}
{{- define "flowline.egressRules" -}}
{{- $egress := .Values.networkPolicy.egress -}}
# DNS.
- ports:
    {{- toYaml $egress.dns.ports | nindent 4 }}
  {{- with $egress.dns.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
# The Kubernetes API server (networkPolicy.egress.kubeAPIServer).
- to:
  {{- range $egress.kubeAPIServer.cidrs }}
  - ipBlock: {cidr: {{ . | quote }}}
  {{- end }}
  ports:
  {{- range $egress.kubeAPIServer.ports }}
  - {port: {{ . | int }}, protocol: TCP}
  {{- end }}
{{- with $egress.extraRules }}
# networkPolicy.egress.extraRules.
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* What a ServiceMonitor endpoint and a PodMonitor podMetricsEndpoint share; call
with the serviceMonitor or podMonitor values. */}}
{{- define "flowline.scrapeEndpoint" -}}
- port: http
  path: /metrics
  interval: {{ .interval }}
  {{- with .scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  {{- with .relabelings }}
  relabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
The URL the API is reached at from outside: the base of callback URLs. publicUrl, else
the Ingress host, else the API Service inside the cluster.
*/}}
{{- define "flowline.publicUrl" -}}
{{- if .Values.publicUrl -}}
{{- .Values.publicUrl -}}
{{- else if and .Values.ingress.enabled .Values.ingress.host -}}
{{- ternary "https" "http" (ne .Values.ingress.tlsSecretName "") }}://{{ .Values.ingress.host }}
{{- else -}}
http://{{ include "flowline.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.service.port }}
{{- end -}}
{{- end }}

{{/* Member Lease slots of a sharded controller: one per replica, one for the extra
pod of a rolling update (maxSurge 1) and one for a replica still stopping. The
leader-election Role names exactly these. */}}
{{- define "flowline.memberSlots" -}}
{{ add (int .Values.controller.replicas) 2 }}
{{- end }}

{{/* The Secret holding the seal key: sealKey.existingSecret, else the chart's own. */}}
{{- define "flowline.sealKeySecret" -}}
{{- .Values.sealKey.existingSecret | default (printf "%s-seal-key" (include "flowline.fullname" .)) }}
{{- end }}
