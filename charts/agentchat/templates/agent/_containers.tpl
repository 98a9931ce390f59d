{{/*
agentchat.sidecarContainer: the policy sidecar, without a leading "- " so the caller can make it
a native sidecar (adding restartPolicy: Always) or a plain container.
It listens on 127.0.0.1 only: the agent in the same pod is its one client, and nothing outside
the pod can reach it whatever the NetworkPolicy says. The kubelet's httpGet probes connect to
the pod IP, so its probes are exec probes over loopback.
*/}}
{{- define "agentchat.sidecarContainer" -}}
name: policy
image: {{ include "agentchat.image" (dict "ctx" . "image" .Values.sidecar.image) }}
imagePullPolicy: {{ .Values.sidecar.image.pullPolicy }}
args: ["policy", "serve", "--host", "127.0.0.1", "--port", "{{ .Values.sidecar.port }}"]
envFrom:
  - configMapRef:
      name: {{ include "agentchat.fullname" . }}-env
{{- with .Values.sidecar.extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
startupProbe:
  {{- include "agentchat.loopbackProbe" (dict "path" "/livez" "port" .Values.sidecar.port "probe" .Values.sidecar.startupProbe) | nindent 2 }}
livenessProbe:
  {{- include "agentchat.loopbackProbe" (dict "path" "/livez" "port" .Values.sidecar.port "probe" .Values.sidecar.livenessProbe) | nindent 2 }}
readinessProbe:
  {{- include "agentchat.loopbackProbe" (dict "path" "/readyz" "port" .Values.sidecar.port "probe" .Values.sidecar.readinessProbe) | nindent 2 }}
resources:
  {{- toYaml .Values.sidecar.resources | nindent 2 }}
securityContext:
  {{- include "agentchat.containerSecurityContext" . | nindent 2 }}
volumeMounts:
  - {name: tmp, mountPath: /tmp}
  - {name: catalog, mountPath: /etc/agentchat/catalog, readOnly: true}
  - {name: policy, mountPath: /etc/agentchat/policy, readOnly: true}
  {{- if include "agentchat.policyTestsConfigMap" . }}
  - {name: policy-tests, mountPath: /etc/agentchat/policy-tests, readOnly: true}
  {{- end }}
  - {name: jwks, mountPath: /etc/agentchat/jwks, readOnly: true}
  {{- if include "agentchat.hasUserJwks" . }}
  - {name: user-jwks, mountPath: /etc/agentchat/user-jwks, readOnly: true}
  {{- end }}
{{- end }}

{{/*
agentchat.devSyncInit: dev only. Copies the installed package to a writable emptyDir that comes
first on PYTHONPATH, so skaffold can sync edited sources into it while the root filesystem stays
read-only.
*/}}
{{- define "agentchat.devSyncInit" -}}
- name: dev-sources
  image: {{ include "agentchat.image" (dict "ctx" . "image" .Values.agent.image) }}
  imagePullPolicy: {{ .Values.agent.image.pullPolicy }}
  command:
    - python
    - -c
    - "import agentchat, os, shutil; shutil.copytree(os.path.dirname(agentchat.__file__), '/opt/agentchat-dev/agentchat', dirs_exist_ok=True)"
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {memory: 128Mi}
  securityContext:
    {{- include "agentchat.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - {name: dev-sources, mountPath: /opt/agentchat-dev}
{{- end }}
