{{/*
agentchat.name: the chart name, or nameOverride.
*/}}
{{- define "agentchat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agentchat.fullname: the installation's name. It is also the AgentChat resource's name, so the
operator's objects (NAME-jwks, NAME-service-token, NAME-signing-keys) derive from it.
Truncated to 40 so that the longest derived name (NAME-signing-keys, NAME-postgresql-headless)
still fits in 63 characters.
*/}}
{{- define "agentchat.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
agentchat.chart: chart name and version for the helm.sh/chart label.
*/}}
{{- define "agentchat.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agentchat.selectorLabels: the minimal, immutable selector of one component. Call with
(dict "ctx" $ "component" "agent"). Never merged with user labels: a Deployment's selector
cannot change after install.
*/}}
{{- define "agentchat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentchat.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
agentchat.labels: every object's labels (selector labels plus version, manager and the
user's commonLabels). Call with (dict "ctx" $ "component" "agent").
*/}}
{{- define "agentchat.labels" -}}
{{ include "agentchat.selectorLabels" . }}
helm.sh/chart: {{ include "agentchat.chart" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: agentchat
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
agentchat.image: "repository:tag" of one image values block; the tag defaults to appVersion.
A tag may carry a digest ("v1@sha256:…"), as skaffold's setValueTemplates write it.
Call with (dict "ctx" $ "image" .Values.agent.image).
*/}}
{{- define "agentchat.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion (toString .image.tag)) }}
{{- end }}

{{/*
agentchat.containerSecurityContext: the hardened context every container runs with
(non-root, read-only root filesystem, no privilege escalation, no capabilities).
*/}}
{{- define "agentchat.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
agentchat.secretName: the Secret the chart itself writes (DSN, LLM key, dev database password),
only rendered when a value is given inline.
*/}}
{{- define "agentchat.secretName" -}}
{{- printf "%s-secrets" (include "agentchat.fullname" .) }}
{{- end }}

{{/*
agentchat.databaseSecret: "name key" of the Secret holding DATABASE_URL, or "" when there is none
(the embedded database is refused in production, see validate.tpl).
*/}}
{{- define "agentchat.databaseSecret" -}}
{{- if .Values.database.existingSecret }}
{{- printf "%s %s" .Values.database.existingSecret .Values.database.existingSecretKey }}
{{- else if or .Values.database.url .Values.postgresql.enabled }}
{{- printf "%s database-url" (include "agentchat.secretName" .) }}
{{- end }}
{{- end }}

{{/*
agentchat.databaseUrl: the DSN the chart stores in its own Secret: the value given, else the
dev PostgreSQL StatefulSet's.
*/}}
{{- define "agentchat.databaseUrl" -}}
{{- if .Values.database.url }}
{{- .Values.database.url }}
{{- else if .Values.postgresql.enabled }}
{{- $pg := .Values.postgresql }}
{{- printf "postgresql://%s:%s@%s-postgresql:5432/%s" $pg.username $pg.password (include "agentchat.fullname" .) $pg.database }}
{{- end }}
{{- end }}

{{/*
agentchat.llmSecret: "name key" of the Secret holding the LLM API key, or "".
*/}}
{{- define "agentchat.llmSecret" -}}
{{- if .Values.llm.existingSecret }}
{{- printf "%s %s" .Values.llm.existingSecret .Values.llm.existingSecretKey }}
{{- else if .Values.llm.apiKey }}
{{- printf "%s llm-api-key" (include "agentchat.secretName" .) }}
{{- end }}
{{- end }}

{{/*
agentchat.chartSecretData: the data of the chart's own Secret, as a dict (empty: no Secret).
*/}}
{{- define "agentchat.chartSecretData" -}}
{{- $data := dict }}
{{- if and (not .Values.database.existingSecret) (include "agentchat.databaseUrl" .) }}
{{- $_ := set $data "database-url" (include "agentchat.databaseUrl" .) }}
{{- end }}
{{- if and (not .Values.llm.existingSecret) .Values.llm.apiKey }}
{{- $_ := set $data "llm-api-key" .Values.llm.apiKey }}
{{- end }}
{{- if .Values.postgresql.enabled }}
{{- $_ := set $data "postgres-password" .Values.postgresql.password }}
{{- end }}
{{- toYaml $data }}
{{- end }}

{{/*
agentchat.jwksSecret: the Secret with the service-token JWKS (key jwks.json), by default the
operator's NAME-jwks.
*/}}
{{- define "agentchat.jwksSecret" -}}
{{- default (printf "%s-jwks" (include "agentchat.fullname" .)) .Values.jwks.existingSecret }}
{{- end }}

{{/*
agentchat.serviceTokenSecret: the Secret with the service JWT (key token), by default the
operator's NAME-service-token.
*/}}
{{- define "agentchat.serviceTokenSecret" -}}
{{- default (printf "%s-service-token" (include "agentchat.fullname" .)) .Values.serviceToken.existingSecret }}
{{- end }}

{{/*
agentchat.policyConfigMap / catalogConfigMap / userJwksConfigMap: the ConfigMaps mounted as
folders; an existing one replaces the chart's.
*/}}
{{- define "agentchat.policyConfigMap" -}}
{{- default (printf "%s-policy" (include "agentchat.fullname" .)) .Values.policy.existingConfigMap }}
{{- end }}

{{- define "agentchat.catalogConfigMap" -}}
{{- default (printf "%s-catalog" (include "agentchat.fullname" .)) .Values.catalog.existingConfigMap }}
{{- end }}

{{- define "agentchat.userJwksConfigMap" -}}
{{- default (printf "%s-user-jwks" (include "agentchat.fullname" .)) .Values.identity.user.jwks.existingConfigMap }}
{{- end }}

{{/*
agentchat.hasUserJwks: "true" when a user-token key set is configured (inline or existing).
*/}}
{{- define "agentchat.hasUserJwks" -}}
{{- if or .Values.identity.user.jwks.inline .Values.identity.user.jwks.existingConfigMap }}true{{- end }}
{{- end }}

{{/*
agentchat.ssToolsUrl: the ss-tools API base URL; the sandbox Service when the dev sandbox runs.
*/}}
{{- define "agentchat.ssToolsUrl" -}}
{{- if .Values.ssTools.url }}
{{- .Values.ssTools.url }}
{{- else if .Values.sandbox.enabled }}
{{- printf "http://%s-sandbox:%d" (include "agentchat.fullname" .) (int .Values.sandbox.port) }}
{{- end }}
{{- end }}

{{/*
agentchat.policyFiles: the policy folder without its tests (model.conf, policy.csv) as a dict of
ConfigMap key -> content: the shipped policy (files/policy, a copy of agentchat/data/policy) with
the inline values laid over it.
*/}}
{{- define "agentchat.policyFiles" -}}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/policy/*" }}
{{- $_ := set $files (base $path) ($.Files.Get $path) }}
{{- end }}
{{- with .Values.policy.model }}
{{- $_ := set $files "model.conf" . }}
{{- end }}
{{- with .Values.policy.rules }}
{{- $_ := set $files "policy.csv" . }}
{{- end }}
{{- toYaml $files }}
{{- end }}

{{/*
agentchat.policyTests: the policy tests as a dict of file name -> content (the keys of the tests
ConfigMap): the shipped files/policy/tests with policy.tests laid over them.
*/}}
{{- define "agentchat.policyTests" -}}
{{- $tests := dict }}
{{- range $path, $_ := .Files.Glob "files/policy/tests/*.yaml" }}
{{- $_ := set $tests (base $path) ($.Files.Get $path) }}
{{- end }}
{{- range $name, $content := .Values.policy.tests }}
{{- $_ := set $tests $name $content }}
{{- end }}
{{- toYaml $tests }}
{{- end }}

{{/*
agentchat.policyTestsConfigMap: the ConfigMap of the policy tests, mounted whole (no items) at
/etc/agentchat/policy-tests (AGENTCHAT_POLICY_TESTS_DIR), so a new test file changes that
ConfigMap and never the pod template. Empty when the tests are in policy.existingConfigMap
(its tests/ folder, through policy.existingConfigMapItems).
*/}}
{{- define "agentchat.policyTestsConfigMap" -}}
{{- if .Values.policy.existingTestsConfigMap }}
{{- .Values.policy.existingTestsConfigMap }}
{{- else if not .Values.policy.existingConfigMap }}
{{- printf "%s-policy-tests" (include "agentchat.fullname" .) }}
{{- end }}
{{- end }}

{{/*
agentchat.policyItems: the volume items of an existing policy ConfigMap
(policy.existingConfigMapItems); the chart's own has its files at the root and needs none.
*/}}
{{- define "agentchat.policyItems" -}}
{{- if .Values.policy.existingConfigMap }}
{{- with .Values.policy.existingConfigMapItems }}
items:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
agentchat.httpProbe: an httpGet probe on the named port. Call with (dict "path" "/livez"
"port" "http" "probe" .Values.agent.livenessProbe).
*/}}
{{- define "agentchat.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
{{ toYaml .probe }}
{{- end }}

{{/*
agentchat.loopbackProbe: an exec probe for a listener on 127.0.0.1, which the kubelet cannot
reach with httpGet (it connects to the pod IP). Python's urllib from the image itself: no curl in
a slim image, and a non-2xx answer raises, so the probe fails.
*/}}
{{- define "agentchat.loopbackProbe" -}}
exec:
  command:
    - python
    - -c
    - "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{{ .port }}{{ .path }}', timeout={{ .probe.timeoutSeconds | default 1 }})"
{{ toYaml .probe }}
{{- end }}

{{/*
agentchat.operatorObjects: the Secrets and ConfigMap the operator writes, as YAML
{signingKeys, jwksSecret, jwksConfigMap, serviceToken}: NAME-… or agentChat.spec.names. The
operator's Role grants exactly these names.
*/}}
{{- define "agentchat.operatorObjects" -}}
{{- $name := include "agentchat.fullname" . }}
{{- $n := .Values.agentChat.spec.names | default dict }}
signingKeys: {{ $n.signingKeysSecret | default (printf "%s-signing-keys" $name) }}
jwksSecret: {{ $n.jwksSecret | default (printf "%s-jwks" $name) }}
jwksConfigMap: {{ $n.jwksConfigMap | default (printf "%s-jwks" $name) }}
serviceToken: {{ $n.serviceTokenSecret | default (printf "%s-service-token" $name) }}
{{- end }}

{{/*
agentchat.nativeSidecar: "true" when the policy sidecar runs as a native sidecar: asked for
(sidecar.native) and the cluster has them (Kubernetes 1.29+, from Capabilities; `helm
template` takes --kube-version).
*/}}
{{- define "agentchat.nativeSidecar" -}}
{{- if and .Values.sidecar.native (semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version) }}true{{- end }}
{{- end }}

{{/*
agentchat.ingressStreamingAnnotations: ingress-nginx annotations for Gradio's streams, on every
Ingress that routes to the agent (the main one and the page's own, ingress-ui.yaml).
*/}}
{{- define "agentchat.ingressStreamingAnnotations" -}}
{{- if .Values.ingress.nginxStreaming }}
{{- /* Server-sent events: no buffering either way, and reads that outlast a long turn or a
pending confirmation card. Gradio's queue keeps a session's events on the replica that
accepted its submit, so a session sticks to one pod. */}}
nginx.ingress.kubernetes.io/proxy-buffering: "off"
nginx.ingress.kubernetes.io/proxy-request-buffering: "off"
nginx.ingress.kubernetes.io/proxy-read-timeout: {{ .Values.ingress.readTimeoutSeconds | quote }}
nginx.ingress.kubernetes.io/proxy-send-timeout: {{ .Values.ingress.readTimeoutSeconds | quote }}
nginx.ingress.kubernetes.io/proxy-body-size: "8m"
nginx.ingress.kubernetes.io/affinity: "cookie"
nginx.ingress.kubernetes.io/session-cookie-name: "agentchat-affinity"
nginx.ingress.kubernetes.io/session-cookie-path: "/api"
{{- end }}
{{- end }}

{{/*
agentchat.crdServed: "true" when an object of `api` ("group/version/Kind") can be created in
this release: the API serves it, or this is an install that applies crds/ first. On an
upgrade without it (Helm applies crds/ on install only) the chart fails with the one command
that fixes it, unless crds.install renders the CRDs in this release: then the object waits
for the next upgrade (a CRD and its objects cannot be created in one release).
Call with (dict "ctx" $ "api" "kopf.dev/v1/KopfPeering").
*/}}
{{- define "agentchat.crdServed" -}}
{{- $ctx := .ctx }}
{{- $install := dig "crds" "install" false ($ctx.Values | merge dict) }}
{{- if $ctx.Capabilities.APIVersions.Has .api }}true
{{- else if and $ctx.Release.IsInstall (not $install) }}true
{{- else if not $install }}
{{- fail (printf "%s: the cluster does not serve this CRD (Helm applies the chart's crds/ on install, never on upgrade). Apply them once: helm show crds agentchat --version %s | kubectl apply --server-side -f -   (or set crds.install=true; README, Upgrading)" .api $ctx.Chart.Version) }}
{{- end }}
{{- end }}

{{/*
agentchat.migrateHook: when the migration Job runs. Its DSN must exist first: an existing
Secret does before install; the chart's own Secret only after it.
*/}}
{{- define "agentchat.migrateHook" -}}
{{- if .Values.database.existingSecret }}pre-install,pre-upgrade{{ else }}post-install,pre-upgrade{{ end }}
{{- end }}

{{/*
agentchat.egressRule: one egress rule from a values target {to: [...], ports: [...]}; no
peers: any address on those ports. Call with (dict "target" $t "protocol" "TCP").
*/}}
{{- define "agentchat.egressRule" -}}
- {{- with .target.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    {{- range .target.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
{{- end }}

{{/*
agentchat.dnsRule: DNS (53 over UDP and TCP) to the configured peers.
*/}}
{{- define "agentchat.dnsRule" -}}
- {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
{{- end }}
