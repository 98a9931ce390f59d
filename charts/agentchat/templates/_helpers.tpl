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
agentchat.egressRule: one egress rule (TCP) from a values target {to: [...], ports: [...]}, its
peers through agentchat.egressPeers. Call with (dict "target" $t "ctx" $).
*/}}
{{- define "agentchat.egressRule" -}}
- to:
    {{- include "agentchat.egressPeers" (dict "to" .target.to "ctx" .ctx) | nindent 4 }}
  ports:
    {{- range .target.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
{{- end }}

{{/*
agentchat.egressPeers: the peers of an egress rule as a YAML list. Named peers (selectors,
ipBlocks) stay as given; no peers means any address, rendered as 0.0.0.0/0 and ::/0 with
`except` the cloud metadata endpoints (169.254.0.0/16: AWS, GCP, Azure, also where kube2iam and
friends intercept; fd00:ec2::254/128: AWS over IPv6), the API server
(networkPolicy.egress.apiServerCidrs, required then: a chart cannot know it) and
networkPolicy.egress.anyAddressExcept. A given ipBlock of 0.0.0.0/0 or ::/0 gets the same
excepts. Call with (dict "to" $peers "ctx" $).
*/}}
{{- define "agentchat.egressPeers" -}}
{{- $e := dig "egress" dict (.ctx.Values.networkPolicy | default dict) }}
{{- $apiServer := dig "apiServerCidrs" list $e }}
{{- $except := concat (list "169.254.0.0/16" "fd00:ec2::254/128") $apiServer (dig "anyAddressExcept" list $e) }}
{{- $v4 := list }}
{{- $v6 := list }}
{{- range $except }}
{{- if contains ":" . }}{{ $v6 = append $v6 . }}{{ else }}{{ $v4 = append $v4 . }}{{ end }}
{{- end }}
{{- $peers := list }}
{{- range (.to | default (list (dict "ipBlock" (dict "cidr" "0.0.0.0/0")) (dict "ipBlock" (dict "cidr" "::/0")))) }}
{{- $peer := deepCopy . }}
{{- $cidr := dig "ipBlock" "cidr" "" $peer }}
{{- if has $cidr (list "0.0.0.0/0" "::/0") }}
{{- if not $apiServer }}
{{- fail "networkPolicy.egress.apiServerCidrs: an egress rule without peers (or with 0.0.0.0/0) allows any address but the cloud metadata and the API server, so the chart needs the API server's addresses (kubectl get endpoints kubernetes -n default -o jsonpath='{.subsets[*].addresses[*].ip}'); or name the peers of every target (networkPolicy.egress.*.to)" }}
{{- end }}
{{- $_ := set $peer.ipBlock "except" (concat (dig "ipBlock" "except" list $peer) (eq $cidr "::/0" | ternary $v6 $v4) | uniq) }}
{{- end }}
{{- $peers = append $peers $peer }}
{{- end }}
{{- toYaml $peers }}
{{- end }}

{{/*
agentchat.smtpPorts: the SMTP server's ports as a JSON list, for the egress rule: given
(networkPolicy.egress.smtp.ports), else the port of approvals.email.smtpUrl, else its scheme's
(smtps 465, smtp+starttls 587, smtp 25). A URL in approvals.email.existingSecret cannot be
read here: its port must be given.
*/}}
{{- define "agentchat.smtpPorts" -}}
{{- $em := dig "email" dict (.Values.approvals | default dict) }}
{{- $given := dig "egress" "smtp" "ports" list (.Values.networkPolicy | default dict) }}
{{- if $given }}
{{- toJson $given }}
{{- else if $em.existingSecret }}
{{- fail "networkPolicy.egress.smtp.ports: the SMTP URL is in approvals.email.existingSecret, which the chart cannot read; give the SMTP server's port (587 for smtp+starttls, 465 for smtps, 25 for smtp) and, better, its address (networkPolicy.egress.smtp.to)" }}
{{- else }}
{{- $url := urlParse $em.smtpUrl }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- list (int ($port | default (get (dict "smtps" "465" "smtp+starttls" "587") $url.scheme) | default "25")) | toJson }}
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

{{/*
agentchat.validateApprovalSecrets: fails when a secret of the approval notifications is a plain
value. The webhook's URL (a bearer token for Slack and Mattermost) and an SMTP URL with
credentials would land in the ConfigMap NAME-env and in every revision's stored values; they
are read from Secrets only (the Deployment's secretKeyRef). Not in values.schema.json: a schema
error prints the value it refuses, and these messages never do. Nil-safe: a release before
approvals has none of these values (--reuse-values).
*/}}
{{- define "agentchat.validateApprovalSecrets" -}}
{{- $ap := .Values.approvals | default dict }}
{{- $wh := $ap.webhook | default dict }}
{{- $em := $ap.email | default dict }}
{{- if $wh.url }}
{{- fail (printf "approvals.webhook.url is no longer read (chart 0.4): a Slack or Mattermost webhook URL is a bearer secret, kept out of values and ConfigMaps. Put it in the Secret %s under the key %s, set approvals.webhook.enabled=true, approvals.webhook.existingSecret and approvals.webhook.urlKey, and drop the old value (--set approvals.webhook.url=null)" ($wh.existingSecret | default "named by approvals.webhook.existingSecret") ($wh.urlKey | default "webhook-url")) }}
{{- end }}
{{- if and $wh.enabled (not $wh.existingSecret) }}
{{- fail "approvals.webhook.enabled needs approvals.webhook.existingSecret: a Secret with the webhook's URL (key approvals.webhook.urlKey) and its signing key (key approvals.webhook.existingSecretKey); approval webhooks are always signed" }}
{{- end }}
{{- if and $em.smtpUrl (urlParse $em.smtpUrl).userinfo }}
{{- fail "approvals.email.smtpUrl carries credentials (user:pass@), which would land in the ConfigMap NAME-env: put the whole URL in a Secret and set approvals.email.existingSecret (its key: approvals.email.existingSecretKey, smtp-url), and drop the credentials from approvals.email.smtpUrl (--set approvals.email.smtpUrl=null)" }}
{{- end }}
{{- range $name := list "AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL" "AGENTCHAT_AGENT_APPROVAL_WEBHOOK_SECRET" "AGENTCHAT_AGENT_SMTP_URL" "AGENTCHAT_AGENT_LLM_API_KEY" "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET" "AGENTCHAT_AGENT_RESUME_KEY" }}
{{- if hasKey ($.Values.extraConfig | default dict) $name }}
{{- fail (printf "extraConfig.%s: a secret never goes in the ConfigMap NAME-env; the chart reads it from a Secret (approvals.webhook.existingSecret, approvals.email.existingSecret, llm.existingSecret, serviceToken.endpoint.existingSecret)" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
agentchat.upstreams: the values of the upstream MCP servers as YAML {secretsPath, servers}
(docs/upstreams.md). Nil-safe: a release before them has no `upstreams` (--reuse-values).
*/}}
{{- define "agentchat.upstreams" -}}
{{- $u := .Values.upstreams | default dict }}
secretsPath: {{ $u.secretsPath | default "/var/run/secrets/agentchat/upstreams" }}
servers:
  {{- toYaml ($u.servers | default dict) | nindent 2 }}
{{- end }}

{{/*
agentchat.urlPorts: the ports of a list of http(s) URLs as a JSON list (each URL's own, else
its scheme's: 443 https, 80 http), for an upstream's egress rule without `egress.ports`.
*/}}
{{- define "agentchat.urlPorts" -}}
{{- $ports := list }}
{{- range . }}
{{- $url := urlParse . }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- $ports = append $ports (int ($port | default (eq $url.scheme "http" | ternary "80" "443"))) }}
{{- end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/*
agentchat.catalogUpstreams: the `upstreams` section of the chart's own catalog (catalog.inline,
else files/catalog.yaml) as YAML; empty with catalog.existingConfigMap, which the chart cannot
read.
*/}}
{{- define "agentchat.catalogUpstreams" -}}
{{- if not .Values.catalog.existingConfigMap }}
{{- $catalog := default (.Files.Get "files/catalog.yaml") .Values.catalog.inline | fromYaml }}
{{- toYaml ($catalog.upstreams | default dict) }}
{{- end }}
{{- end }}

{{/*
agentchat.validateUpstreams: the upstream servers' values against the chart's own catalog:
each catalog upstream that authenticates has its Secret, every URL the agent may call is named
on the egress policy (with networkPolicy.egress.enabled, each one has its rule), `auth.type:
none` only in dev, and no server in values is unknown to the catalog. Skipped with
catalog.existingConfigMap. Call with $.
*/}}
{{- define "agentchat.validateUpstreams" -}}
{{- $servers := (include "agentchat.upstreams" . | fromYaml).servers | default dict }}
{{- $egress := and .Values.networkPolicy.enabled (dig "egress" "enabled" false (.Values.networkPolicy | default dict)) }}
{{- if not .Values.catalog.existingConfigMap }}
{{- $catalog := include "agentchat.catalogUpstreams" . | fromYaml }}
{{- $keys := dict "bearer" "token" "client_credentials" "client_secret" "jwt" "private_key.pem" }}
{{- range $name, $up := $catalog }}
{{- $s := get $servers $name | default dict }}
{{- $auth := dig "auth" "type" "" ($up | default dict) }}
{{- if and (eq $auth "none") (eq $.Values.mode "production") }}
{{- fail (printf "catalog: upstream %s has auth.type none, which is for dev only: give it a credential (bearer, client_credentials or jwt; docs/upstreams.md) and its Secret in upstreams.servers.%s.existingSecret" $name $name) }}
{{- end }}
{{- if and $egress (not $s) }}
{{- fail (printf "upstreams.servers.%s: networkPolicy.egress.enabled needs the catalog's upstream %s there, with its urls and egress peers (a NetworkPolicy cannot name a host)" $name $name) }}
{{- end }}
{{- if and (hasKey $keys $auth) (not $s.existingSecret) }}
{{- fail (printf "upstreams.servers.%s.existingSecret: the catalog's upstream %s authenticates with %s; give the Secret holding its key %s (mounted at %s/%s/)" $name $name $auth (get $keys $auth) (include "agentchat.upstreams" $ | fromYaml).secretsPath $name) }}
{{- end }}
{{- if $s }}
{{- range $env, $url := (dig "url" dict ($up | default dict)) }}
{{- if not (has $url ($s.urls | default list)) }}
{{- fail (printf "upstreams.servers.%s.urls: add %s (the catalog's upstreams.%s.url.%s): the egress policy names every URL the agent calls" $name $url $name $env) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $_ := $servers }}
{{- if not (hasKey $catalog $name) }}
{{- fail (printf "upstreams.servers.%s: the catalog has no upstream %s (the shipped catalog's Superset section is commented out: give the catalog with catalog.inline or catalog.existingConfigMap; docs/upstreams.md)" $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
