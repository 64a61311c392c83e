{{/* Names, labels and the pieces every pipeline pod shares. */}}

{{- define "aitax.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "aitax.fullname" -}}
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

{{- define "aitax.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of one component's objects: "<fullname>-<component>" (components are short, so 63 chars hold). */}}
{{- /* A camera's own ingest-detect (`camera` in the dict) is named, and selected, apart from the others. */}}
{{- define "aitax.componentName" -}}
{{- $name := ternary (printf "%s-%s" .component .camera) .component (not (empty .camera)) }}
{{- printf "%s-%s" (include "aitax.fullname" .root) $name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "aitax.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aitax.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .camera }}
aitax/camera: {{ . }}
{{- end }}
{{- end }}

{{- define "aitax.labels" -}}
helm.sh/chart: {{ include "aitax.chart" .root }}
{{ include "aitax.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: aitax
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pods that may reach the brokers carry this label; the brokers' NetworkPolicy admits only them. */}}
{{- define "aitax.kafkaClientLabel" -}}
aitax/kafka-client: {{ .Release.Name | quote }}
{{- end }}

{{- define "aitax.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "aitax.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "<registry>/<repository>:<tag or appVersion>" for images.pipeline / .emulator / .kafka. */}}
{{- define "aitax.image" -}}
{{- $image := index .root.Values.images .name }}
{{- $tag := default .root.Chart.AppVersion $image.tag }}
{{- if .root.Values.images.registry }}
{{- printf "%s/%s:%s" (trimSuffix "/" .root.Values.images.registry) $image.repository $tag }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{- define "aitax.imagePullSecrets" -}}
{{- with .Values.images.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Kafka: names, bootstrap list and the KRaft cluster id. */}}
{{- define "aitax.kafka.name" -}}
{{- include "aitax.componentName" (dict "root" . "component" "kafka") }}
{{- end }}

{{- define "aitax.kafka.headless" -}}
{{- printf "%s-headless" (include "aitax.kafka.name" .) }}
{{- end }}

{{/* Every broker's stable DNS name: clients bootstrap from any of them even while one is down. */}}
{{- define "aitax.kafka.bootstrap" -}}
{{- $name := include "aitax.kafka.name" . }}
{{- $headless := include "aitax.kafka.headless" . }}
{{- $brokers := list }}
{{- range $ordinal := until (int .Values.kafka.replicas) }}
{{- $brokers = append $brokers (printf "%s-%d.%s.%s.svc.%s:9092" $name $ordinal $headless $.Release.Namespace $.Values.clusterDomain) }}
{{- end }}
{{- join "," $brokers }}
{{- end }}

{{/* A stable cluster id per release and namespace (KRaft needs the same one on every broker, across upgrades):
22 base64url characters = 16 bytes; hex digits are base64url characters and a final "A" keeps the padding bits zero. */}}
{{- define "aitax.kafka.clusterId" -}}
{{- if .Values.kafka.clusterId }}
{{- .Values.kafka.clusterId }}
{{- else }}
{{- printf "%sA" (printf "aitax/%s/%s" .Release.Namespace .Release.Name | sha256sum | trunc 21) }}
{{- end }}
{{- end }}

{{- define "aitax.identify.replicas" -}}
{{- if kindIs "invalid" .Values.identify.replicas }}
{{- mul (int .Values.identify.ratio) (int .Values.ingestDetect.replicas) }}
{{- else }}
{{- .Values.identify.replicas }}
{{- end }}
{{- end }}

{{/* The workload's application as aitax/runs/applications.py describes it (files/applications.json, which a test
keeps equal to it), as JSON: its stages' commands, whether it splits into three, where its results go. */}}
{{- define "aitax.application" -}}
{{- $apps := .Files.Get "files/applications.json" | fromJson }}
{{- if not (hasKey $apps .Values.workload) }}
{{- fail (printf "workload: %s: choose one of %s" .Values.workload (keys $apps | sortAlpha | join ", ")) }}
{{- end }}
{{- get $apps .Values.workload | toJson }}
{{- end }}

{{/* "true" when frames go through Kafka: the three-stage design (real or emulated) or an application whose real
producer publishes frames, as Object Detection's (the emulator replays every application on Face Recognition's
topics). */}}
{{- define "aitax.framesThroughKafka" -}}
{{- $app := include "aitax.application" . | fromJson }}
{{- or (eq (int .Values.stages) 3) (and (eq .Values.mode "real") $app.framesThroughKafka) }}
{{- end }}

{{/* Elasticsearch URL source for AITAX_ELASTICSEARCH_URL: a Secret key, a value, the bundled node, or none. */}}
{{- define "aitax.elasticsearch.urlEnv" -}}
{{- $es := .Values.elasticsearch }}
{{- if $es.external.existingSecret }}
- name: AITAX_ELASTICSEARCH_URL
  valueFrom:
    secretKeyRef:
      name: {{ $es.external.existingSecret }}
      key: url
{{- else if $es.external.url }}
- name: AITAX_ELASTICSEARCH_URL
  value: {{ $es.external.url | quote }}
{{- else if $es.bundled.enabled }}
- name: AITAX_ELASTICSEARCH_URL
  value: {{ printf "%s://%s:9200" (ternary "https" "http" .Values.security.enabled) (include "aitax.componentName" (dict "root" . "component" "elasticsearch")) | quote }}
{{- end }}
{{- end }}

{{- define "aitax.elasticsearch.enabled" -}}
{{- $es := .Values.elasticsearch }}
{{- if or $es.external.existingSecret $es.external.url $es.bundled.enabled }}true{{ end }}
{{- end }}

{{/* Identities (security.enabled): one Secret per principal, "<fullname>-identity-<principal>", laid out as the
local stack's principal folders (ca.crt, tls.crt, tls.key, username, password; keystore.pem for the Java ones),
made by the secrets Job (templates/secrets-job.yaml) or supplied. files/security.json is aitax/stack/security.py's table,
which a test keeps equal to it. */}}
{{- define "aitax.identity.prefix" -}}
{{- include "aitax.componentName" (dict "root" . "component" "identity") }}
{{- end }}

{{- define "aitax.identity.secret" -}}
{{- printf "%s-%s" (include "aitax.identity.prefix" .root) .principal }}
{{- end }}

{{- define "aitax.security" -}}
{{- .Files.Get "files/security.json" }}
{{- end }}

{{/* A principal's Secret as a pod volume: readable by the pod's group only (fsGroup). */}}
{{- define "aitax.identity.volume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ include "aitax.identity.secret" . }}
    defaultMode: 0440
{{- end }}

{{/* "true" when the bundled Elasticsearch is secured: its clients get their principal's user from the Secret. */}}
{{- define "aitax.elasticsearch.secured" -}}
{{- and .Values.security.enabled .Values.elasticsearch.bundled.enabled }}
{{- end }}

{{/* The environment contract of every stage process (see aitax/commands/options.py): brokers, events, metrics, state. */}}
{{- define "aitax.stageEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: AITAX_BOOTSTRAP
  value: {{ include "aitax.kafka.bootstrap" . | quote }}
{{- include "aitax.elasticsearch.urlEnv" . }}
- name: AITAX_EVENTS
  value: {{ if include "aitax.elasticsearch.enabled" . }}"es:$(AITAX_ELASTICSEARCH_URL)"{{ else }}"none"{{ end }}
- name: AITAX_METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
- name: AITAX_METRICS_HOST
  value: "0.0.0.0"
- name: AITAX_RUN_ID
  value: {{ .Values.runId | quote }}
# In a fresh release the brokers and the topics Job start alongside the stages: wait for them, do not crash-loop.
- name: AITAX_KAFKA_WAIT_S
  value: "600"
- name: AITAX_ACCELERATION_FACTOR
  value: {{ .Values.emulator.factor | quote }}
{{- end }}

{{/* Writable places on a read-only root filesystem: the event spool under AITAX_HOME and /tmp. The models stay
in the image (read-only) under AITAX_HOME/downloads. */}}
{{- define "aitax.stageVolumeMounts" -}}
- name: spool
  mountPath: /opt/aitax/home/spool
- name: tmp
  mountPath: /tmp
{{- end }}

{{- define "aitax.stageVolumes" -}}
- name: spool
  emptyDir:
    sizeLimit: 1Gi
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- end }}

{{/*
A stage's compute threads (TensorFlow, OpenVINO, OpenCV): its CPU limit rounded up, at least 1. Raising
`resources.limits.cpu` is how a core-scaling study (the paper's Fig. 5) runs on a cluster.
*/}}
{{- define "aitax.threads" -}}
{{- $cpu := toString (dig "limits" "cpu" "1" .) -}}
{{- $cores := ternary (divf (trimSuffix "m" $cpu | float64) 1000) ($cpu | float64) (hasSuffix "m" $cpu) -}}
{{- max 1 (int (ceil $cores)) -}}
{{- end -}}

{{- define "aitax.metricsPort" -}}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}

{{- define "aitax.stageProbes" -}}
{{- $p := .Values.probes }}
startupProbe:
  httpGet:
    path: /metrics
    port: metrics
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
livenessProbe:
  httpGet:
    path: /metrics
    port: metrics
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
# Ready once the stage can work at speed (its model warm, its producer connected, its consumer holding partitions):
# `helm install --wait` and an experiment's rollouts wait for that, as a local run waits for its processes.
readinessProbe:
  httpGet:
    path: /ready
    port: metrics
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end }}

{{/* Pod metadata of a stage: labels (selector + kafka client + metrics) and the scrape annotations. */}}
{{- define "aitax.stagePodMetadata" -}}
metadata:
  labels:
    {{- include "aitax.labels" . | nindent 4 }}
    {{- include "aitax.kafkaClientLabel" .root | nindent 4 }}
    aitax/metrics: "true"
  {{- if .root.Values.metrics.scrapeAnnotations }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ .root.Values.metrics.port | quote }}
    prometheus.io/path: /metrics
  {{- end }}
{{- end }}

{{/* The Deployment of one stage. Arguments: root, component, image (pipeline|emulator), replicas, args (list),
stage (values block with resources/nodeSelector/tolerations/affinity, and gpus where the stage has a GPU runtime),
extraEnv/extraMounts/extraVolumes (YAML). A stage given GPUs runs the pipelineGpu image and asks for them as an
extended resource (limits only: Kubernetes takes the request from the limit, and a GPU is never overcommitted).
With security on, the stage runs as its command's principal (files/security.json), its Secret at /etc/aitax/identity
for Kafka and the bundled Elasticsearch. A consumer stage also holds the reader's, at /etc/aitax/reader: an
experiment's read-back (`aitax collect`) runs in one of its pods as the reader. */}}
{{- define "aitax.stageDeployment" -}}
{{- $root := .root }}
{{- $security := include "aitax.security" $root | fromJson }}
{{- $secured := $root.Values.security.enabled }}
{{- $consumer := has .component (list "identify" "emulate-consumers" "detect-objects") }}
{{- $gpus := int (default 0 .stage.gpus) }}
{{- $resources := .stage.resources }}
{{- if gt $gpus 0 }}
{{- $resources = merge (dict "limits" (merge (dict "nvidia.com/gpu" $gpus) (default dict .stage.resources.limits))) (deepCopy .stage.resources) }}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "aitax.componentName" . }}
  labels:
    {{- include "aitax.labels" . | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "aitax.selectorLabels" . | nindent 6 }}
  template:
    {{- include "aitax.stagePodMetadata" . | nindent 4 }}
    spec:
      serviceAccountName: {{ include "aitax.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- include "aitax.imagePullSecrets" $root | nindent 6 }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      # Stage processes drain in-flight faces on SIGTERM before they exit.
      terminationGracePeriodSeconds: 60
      containers:
        - name: {{ .component }}
          image: {{ include "aitax.image" (dict "root" $root "name" (ternary "pipelineGpu" .image (gt $gpus 0))) }}
          imagePullPolicy: {{ $root.Values.images.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "aitax.stageEnv" $root | nindent 12 }}
            {{- if $secured }}
            - name: AITAX_KAFKA_TLS
              value: /etc/aitax/identity
            {{- if eq (include "aitax.elasticsearch.secured" $root) "true" }}
            - name: AITAX_ELASTICSEARCH_CREDENTIALS
              value: /etc/aitax/identity
            {{- end }}
            {{- end }}
            {{- with .extraEnv }}
            {{- . | nindent 12 }}
            {{- end }}
          ports:
            {{- include "aitax.metricsPort" $root | nindent 12 }}
          {{- include "aitax.stageProbes" $root | nindent 10 }}
          resources:
            {{- toYaml $resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            {{- include "aitax.stageVolumeMounts" $root | nindent 12 }}
            {{- if $secured }}
            - name: identity
              mountPath: /etc/aitax/identity
              readOnly: true
            {{- if $consumer }}
            - name: reader
              mountPath: {{ $security.readerMount }}
              readOnly: true
            {{- end }}
            {{- end }}
            {{- with .extraMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "aitax.stageVolumes" $root | nindent 8 }}
        {{- if $secured }}
        {{- include "aitax.identity.volume" (dict "root" $root "name" "identity" "principal" (get $security.commands .component)) | nindent 8 }}
        {{- if $consumer }}
        {{- include "aitax.identity.volume" (dict "root" $root "name" "reader" "principal" $security.reader) | nindent 8 }}
        {{- end }}
        {{- end }}
        {{- with .extraVolumes }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- include "aitax.placement" .stage | nindent 6 }}
{{- end }}

{{/* A pod's placement from its values block: nodeSelector, tolerations, affinity (each left out when empty). */}}
{{- define "aitax.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Cross-field checks the JSON schema cannot express; each names the field to fix. */}}
{{- define "aitax.validate" -}}
{{- $k := .Values.kafka }}
{{- if gt (int $k.replicationFactor) (int $k.replicas) }}
{{- fail (printf "kafka.replicationFactor (%v) must not exceed kafka.replicas (%v)" $k.replicationFactor $k.replicas) }}
{{- end }}
{{- if gt (int $k.minInsyncReplicas) (int $k.replicationFactor) }}
{{- fail (printf "kafka.minInsyncReplicas (%v) must not exceed kafka.replicationFactor (%v)" $k.minInsyncReplicas $k.replicationFactor) }}
{{- end }}
{{- if gt (int $k.controllers) (int $k.replicas) }}
{{- fail (printf "kafka.controllers (%v) must not exceed kafka.replicas (%v)" $k.controllers $k.replicas) }}
{{- end }}
{{- if eq .Values.mode "real" }}
{{- $g := .Values.identify.gallery }}
{{- $given := 0 }}
{{- range (list $g.base64 $g.existingConfigMap $g.existingSecret) }}{{ if . }}{{ $given = add1 $given }}{{ end }}{{ end }}
{{- if gt (int $given) 1 }}
{{- fail "identify.gallery: set at most one of identify.gallery.base64, identify.gallery.existingConfigMap or identify.gallery.existingSecret (none: the demo gallery in the pipeline image)" }}
{{- end }}
{{- if and (eq (include "aitax.framesThroughKafka" .) "true") (gt (int .Values.ingestDetect.gpus) 0) }}
{{- fail "ingestDetect.gpus: with frames through Kafka ingest only decodes; detection's GPUs are detect.gpus" }}
{{- end }}
{{- range $name := list "ingestDetect" "detect" "identify" }}
{{- $s := index $.Values $name }}
{{- if and (eq (toString $s.detector) "yunet") (eq $s.runtime "cuda") }}
{{- fail (printf "%s.detector: yunet runs on the CPU (OpenCV); with runtime cuda set detector to mtcnn" $name) }}
{{- end }}
{{- if and (eq $s.runtime "cuda") (lt (int $s.gpus) 1) }}
{{- fail (printf "%s.runtime: cuda runs on an NVIDIA GPU: set %s.gpus to 1 or more (and GPU nodes' %s.nodeSelector and %s.tolerations)" $name $name $name $name) }}
{{- end }}
{{- if and (ne $s.runtime "cuda") (gt (int $s.gpus) 0) }}
{{- fail (printf "%s.gpus: %v GPU(s) that runtime %s would not use: set %s.runtime to cuda, or gpus to 0" $name $s.gpus $s.runtime $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- $app := include "aitax.application" . | fromJson }}
{{- if and (not $app.splits) (eq (int .Values.stages) 3) }}
{{- fail (printf "stages: 3: %s has two stages (%s, then %s); three are for an application that splits one" .Values.workload $app.producer $app.consumer) }}
{{- end }}
{{- if and .Values.elasticsearch.bundled.enabled (or .Values.elasticsearch.external.url .Values.elasticsearch.external.existingSecret) }}
{{- fail "elasticsearch: elasticsearch.external is given, so set elasticsearch.bundled.enabled=false (the bundled lab node is on by default)" }}
{{- end }}
{{- if and (eq .Values.mode "emulated") (not .Values.emulator.profile) (not .Values.emulator.profileYaml) }}
{{- fail "emulator.profile: give a built-in profile name (e.g. paper) or emulator.profileYaml" }}
{{- end }}
{{- end }}
