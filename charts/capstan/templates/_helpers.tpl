{{/* Names and labels. */}}
{{- define "capstan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "capstan.fullname" -}}
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

{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capstan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "capstan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "capstan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "capstan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "capstan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "capstan.leaseName" -}}
{{- default (include "capstan.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "capstan.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Where things are mounted in the pod. The config file names each plugin relative to its
own directory, so the same file works wherever the tree is laid out.
*/}}
{{- define "capstan.root" -}}/etc/capstan{{- end }}

{{/* The .wasm file name of plugin (dict "name" NAME "plugin" PLUGIN) inside its volume. */}}
{{- define "capstan.pluginFile" -}}
{{- if .plugin.source.wasm -}}
{{ .name }}.wasm
{{- else -}}
{{ default (printf "%s.wasm" .name) .plugin.source.file }}
{{- end }}
{{- end }}

{{/* The config ConfigMap's name and each chart-made plugin ConfigMap's name. */}}
{{- define "capstan.configName" -}}
{{- printf "%s-config" (include "capstan.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "capstan.pluginConfigMapName" -}}
{{- printf "%s-plugin-%s" (include "capstan.fullname" .root) .name | trunc 253 }}
{{- end }}

{{/*
Checks that fail the render with one clear line instead of a host that cannot start.
*/}}
{{- define "capstan.validate" -}}
{{- if not .Values.plugins }}
{{- fail "no plugins: set plugins.<name> with a source, parent and children (`capstan inspect --helm-values PLUGIN.wasm` prints the entry)" }}
{{- end }}
{{- $sharded := and .Values.sharding .Values.sharding.enabled }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) (not $sharded) }}
{{- fail (printf "replicas is %d but neither leaderElection.enabled nor sharding.enabled is set: more than one host needs leader election or sharding" (int .Values.replicas)) }}
{{- end }}
{{- if and .Values.leaderElection.enabled $sharded }}
{{- fail "leaderElection.enabled and sharding.enabled exclude each other: with sharding every replica reconciles its share" }}
{{- end }}
{{- range $name, $p := .Values.plugins }}
{{- range $k := prepend (concat ($p.children | default list) ($p.related | default list)) $p.parent }}
{{- if and (eq $k.group "") (eq $k.kind "Secret") (not $p.allowSecrets) }}
{{- fail (printf "plugins.%s declares Secret (to write or to read): RBAC for Secrets is granted only by the operator, with plugins.%s.allowSecrets=true" $name $name) }}
{{- end }}
{{- end }}
{{- if ne (len (pick $p.source "wasm" "volume" "oci")) 1 }}
{{- fail (printf "plugins.%s.source needs exactly one of wasm (--set-file plugins.%s.source.wasm=PATH), volume (any volume source, with file) or oci (a registry reference)" $name $name) }}
{{- end }}
{{- range $ref := compact (list $p.source.oci (($p.canary | default dict).oci)) }}
{{- if and $.Values.registry.requireDigest (not (contains "@sha256:" $ref)) }}
{{- fail (printf "plugins.%s: %s has no digest and registry.requireDigest is set: pin it (capstan push prints the reference with its digest)" $name $ref) }}
{{- end }}
{{- end }}
{{- $policy := or ($p.verify | default dict).keys $.Values.registry.verify.keys }}
{{- if and $policy (not $.Values.registry.verify.keysConfigMap) }}
{{- fail (printf "plugins.%s: verify keys name entries of registry.verify.keysConfigMap, which is not set" $name) }}
{{- end }}
{{- if and $policy (or (not $p.source.oci) (and $p.canary (not $p.canary.oci))) }}
{{- fail (printf "plugins.%s: a signature policy applies and a plugin from a file or volume carries no signature: give it source.oci (and canary.oci)" $name) }}
{{- end }}
{{- if and $p.canary (ne (len (pick $p.canary "file" "oci")) 1) }}
{{- fail (printf "plugins.%s.canary needs exactly one of file (in the source volume) or oci (a registry reference)" $name) }}
{{- end }}
{{- if and (hasKey $p.source "wasm") (hasKey $p.source "file") }}
{{- fail (printf "plugins.%s.source.file goes with source.volume; a source.wasm ConfigMap holds %s.wasm" $name $name) }}
{{- end }}
{{- if hasKey $p.source "wasm" }}
{{- $wasm := $p.source.wasm }}
{{- if not (hasPrefix "\x00asm" $wasm) }}
{{- fail (printf "plugins.%s.source.wasm is not a WebAssembly file: pass the file itself with --set-file plugins.%s.source.wasm=PATH" $name $name) }}
{{- end }}
{{- /* A binary that survives a JSON round trip unchanged is valid UTF-8: what helm's release record (JSON) makes of one, e.g. with --reuse-values. A real component is not. */}}
{{- if eq (get (dict "w" $wasm | toJson | fromJson) "w") $wasm }}
{{- fail (printf "plugins.%s.source.wasm was mangled (helm stores values as JSON text, so --reuse-values cannot carry a binary): pass it again with --set-file plugins.%s.source.wasm=PATH" $name $name) }}
{{- end }}
{{- /* After the mangling check: a mangled binary grows by U+FFFD replacements. */}}
{{- if gt (len $wasm) 1048576 }}
{{- fail (printf "plugins.%s.source.wasm is %d bytes but a ConfigMap holds at most 1048576: ship it in a volume (plugins.%s.source.volume)" $name (len $wasm) $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
RBAC rules from the kinds the plugins declare, merged per (group, resource) with sorted
verbs. Argument: (dict "plugins" PLUGINS "namespaced" BOOL) selects the rules for
namespaced kinds (true) or cluster-scoped kinds (false). Renders a YAML list or nothing.
*/}}
{{- define "capstan.kindRules" -}}
{{- $rules := dict }}
{{- range $name, $p := .plugins }}
{{- $parent := $p.parent }}
{{- if eq $parent.namespaced $.namespaced }}
{{- $verbs := list "get" "list" "watch" }}
{{- if $p.finalizer }}{{- $verbs = append $verbs "patch" }}{{- end }}
{{- $key := printf "%s|%s" $parent.group $parent.plural }}
{{- $_ := set $rules $key (concat (get $rules $key | default list) $verbs) }}
{{- $key = printf "%s|%s/status" $parent.group $parent.plural }}
{{- $_ = set $rules $key (concat (get $rules $key | default list) (list "patch" "update")) }}
{{- /* Children carry blockOwnerDeletion owner references to the parent, which the OwnerReferencesPermissionEnforcement admission plugin allows only with update on the parent's finalizers. */}}
{{- $key = printf "%s|%s/finalizers" $parent.group $parent.plural }}
{{- $_ = set $rules $key (concat (get $rules $key | default list) (list "update")) }}
{{- end }}
{{- range $child := $p.children | default list }}
{{- if eq $child.namespaced $.namespaced }}
{{- $key := printf "%s|%s" $child.group $child.plural }}
{{- $_ := set $rules $key (concat (get $rules $key | default list) (list "create" "delete" "get" "list" "patch" "watch")) }}
{{- end }}
{{- end }}
{{- /* Related kinds are read, never written. */}}
{{- range $related := $p.related | default list }}
{{- if eq $related.namespaced $.namespaced }}
{{- $key := printf "%s|%s" $related.group $related.plural }}
{{- $_ := set $rules $key (concat (get $rules $key | default list) (list "get" "list" "watch")) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key := keys $rules | sortAlpha }}
{{- $parts := splitList "|" $key }}
- apiGroups: [{{ index $parts 0 | quote }}]
  resources: [{{ index $parts 1 | quote }}]
  verbs: {{ get $rules $key | uniq | sortAlpha | toJson }}
{{- end }}
{{- end }}

{{/* Events the host records on parents (events.k8s.io, create and patch for series). */}}
{{- define "capstan.eventRules" -}}
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
The `capstan run --config` file. Paths are relative to the file (mounted at
<root>/config/config.yaml); each plugin's volume is mounted at <root>/plugins/<name>.
Integers go through int64: helm reads YAML numbers as floats (6.7108864e+07).
*/}}
{{- define "capstan.config" -}}
# Generated by the Capstan chart from .Values.plugins.
{{- if include "capstan.pulls" . }}
{{- $r := .Values.registry }}
registry:
  {{- with $r.plainHttp }}
  plainHttp: {{ toJson . }}
  {{- end }}
  {{- if $r.caConfigMap }}
  caFiles: [../registry-ca/ca.crt]
  {{- end }}
  {{- if $r.pullSecret }}
  authFile: ../registry-auth/.dockerconfigjson
  {{- end }}
  requireDigest: {{ $r.requireDigest }}
  maxBytes: {{ int64 $r.maxBytes }}
{{- end }}
{{- with .Values.registry.verify.keys }}
verify:
  keys: {{ include "capstan.verifyKeys" . }}
{{- end }}
plugins:
{{- range $name, $p := .Values.plugins }}
  {{- if $p.source.oci }}
  - path: {{ $p.source.oci }}
  {{- else }}
  - path: ../plugins/{{ $name }}/{{ include "capstan.pluginFile" (dict "name" $name "plugin" $p) }}
  {{- end }}
    {{- with $p.name }}
    name: {{ . }}
    {{- end }}
    {{- with $p.mode }}
    mode: {{ . }}
    {{- end }}
    {{- with $p.canary }}
    canary:
      {{- if .oci }}
      path: {{ .oci }}
      {{- else }}
      path: ../plugins/{{ $name }}/{{ .file }}
      {{- end }}
      selector: {{ toJson .selector }}
    {{- end }}
    {{- with $p.limits }}
    limits:
      {{- with .deadline }}
      deadline: {{ . }}
      {{- end }}
      {{- if hasKey . "memory" }}
      memory: {{ int64 .memory }}
      {{- end }}
      {{- if hasKey . "responseBytes" }}
      responseBytes: {{ int64 .responseBytes }}
      {{- end }}
      {{- if hasKey . "maxChildren" }}
      maxChildren: {{ int64 .maxChildren }}
      {{- end }}
      {{- with .minRequeue }}
      minRequeue: {{ . }}
      {{- end }}
      {{- if hasKey . "cpuMillicores" }}
      cpuMillicores: {{ int64 .cpuMillicores }}
      {{- end }}
      {{- if hasKey . "creationsPerSecond" }}
      creationsPerSecond: {{ int64 .creationsPerSecond }}
      {{- end }}
    {{- end }}
    {{- if hasKey $p "concurrency" }}
    concurrency: {{ int64 $p.concurrency }}
    {{- end }}
    {{- with $p.resync }}
    resync: {{ . }}
    {{- end }}
    {{- with $p.allowClusterKinds }}
    allowClusterKinds: {{ toJson . }}
    {{- end }}
    {{- with $p.allowNamespaces }}
    allowNamespaces: {{ toJson . }}
    {{- end }}
    {{- if $p.allowSecrets }}
    allowSecrets: true
    {{- end }}
    {{- if $p.allowOwnKind }}
    allowOwnKind: true
    {{- end }}
    {{- if $p.allowOwnNamespace }}
    allowOwnNamespace: true
    {{- end }}
    {{- with $p.updates }}
    updates: {{ toJson . }}
    {{- end }}
    {{- with $p.settings }}
    settings: {{ toJson . }}
    {{- end }}
    {{- with $p.verify }}
    verify:
      keys: {{ include "capstan.verifyKeys" .keys }}
    {{- end }}
{{- end }}
{{- end }}

{{/* Key names of registry.verify.keysConfigMap as paths beside the config file. */}}
{{- define "capstan.verifyKeys" -}}
{{- $paths := list }}
{{- range . }}{{ $paths = append $paths (printf "../verify-keys/%s" .) }}{{ end }}
{{- toJson $paths }}
{{- end }}

{{/* "true" when some plugin (or canary) is pulled from a registry; empty otherwise. */}}
{{- define "capstan.pulls" -}}
{{- range $name, $p := .Values.plugins }}
{{- if or $p.source.oci (($p.canary | default dict).oci) }}true{{- end }}
{{- end }}
{{- end }}

{{/* A digest over every chart-made plugin binary. */}}
{{- define "capstan.pluginDigest" -}}
{{- $all := list }}
{{- range $name, $p := .Values.plugins }}
{{- if $p.source.wasm }}{{- $all = append $all (printf "%s:%s" $name ($p.source.wasm | sha256sum)) }}{{- end }}
{{- end }}
{{- join "," $all | sha256sum }}
{{- end }}
