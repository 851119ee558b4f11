{{/* Names ------------------------------------------------------------------------------ */}}
{{- define "magnetar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>"; call with (list $ "broker") */}}
{{- define "magnetar.component" -}}
{{- printf "%s-%s" (include "magnetar.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{/* The DNS name of a Service: (list $ "broker") */}}
{{- define "magnetar.serviceHost" -}}
{{- $root := index . 0 -}}
{{- printf "%s.%s.svc.%s" (include "magnetar.component" .) $root.Release.Namespace $root.Values.clusterDomain -}}
{{- end -}}

{{/* The DNS name of the pod running the container, under its StatefulSet's headless
Service: (list $ "bookie"). $(POD_NAME) is expanded by Kubernetes from the container's env. */}}
{{- define "magnetar.podHost" -}}
{{- printf "$(POD_NAME).%s" (include "magnetar.serviceHost" .) -}}
{{- end -}}

{{- define "magnetar.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{ include "magnetar.selectorLabels" . }}
{{- end -}}

{{- define "magnetar.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "magnetar.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "magnetar.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Cluster addresses ------------------------------------------------------------------- */}}
{{/* The ZooKeeper ensemble as host:port,host:port,... */}}
{{- define "magnetar.zookeeperHosts" -}}
{{- $root := . -}}
{{- if not .Values.components.zookeeper -}}
{{- $url := required "components.zookeeper=false needs externalMetadataStoreUrl" .Values.externalMetadataStoreUrl -}}
{{- regexReplaceAll "^zk://([^/]*).*$" $url "${1}" -}}
{{- else -}}
{{- $hosts := list -}}
{{- range $i := until (int $root.Values.zookeeper.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s:%d" (include "magnetar.component" (list $root "zookeeper")) $i (include "magnetar.serviceHost" (list $root "zookeeper")) (int $root.Values.zookeeper.ports.client)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.metadataUrl" -}}
{{- if .Values.components.zookeeper -}}
{{- printf "zk://%s%s" (include "magnetar.zookeeperHosts" .) .Values.metadataChroot -}}
{{- else -}}
{{- .Values.externalMetadataStoreUrl -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.brokerServiceUrl" -}}
{{- printf "pulsar://%s:%d" (include "magnetar.serviceHost" (list . "broker")) (int .Values.brokers.ports.binary) -}}
{{- end -}}

{{- define "magnetar.brokerWebServiceUrl" -}}
{{- printf "http://%s:%d" (include "magnetar.serviceHost" (list . "broker")) (int .Values.brokers.ports.http) -}}
{{- end -}}

{{/* The proxy's address for clients inside the cluster (helm test, NOTES). */}}
{{- define "magnetar.proxyServiceUrl" -}}
{{- if .Values.tls.enabled -}}
{{- printf "pulsar+ssl://%s:%d" (include "magnetar.serviceHost" (list . "proxy")) (int .Values.proxy.ports.tls) -}}
{{- else -}}
{{- printf "pulsar://%s:%d" (include "magnetar.serviceHost" (list . "proxy")) (int .Values.proxy.ports.binary) -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.proxyWebServiceUrl" -}}
{{- printf "http://%s:%d" (include "magnetar.serviceHost" (list . "proxy")) (int .Values.proxy.ports.http) -}}
{{- end -}}

{{/* Pod environment: the downward API values the args refer to as $(POD_...). */}}
{{- define "magnetar.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{/* Security --------------------------------------------------------------------------- */}}
{{- define "magnetar.tokenKeyArgs" -}}
{{- $t := .Values.auth.token -}}
{{- if $t.publicKey.secretName }}
- --token-public-key
- file:///pulsar/keys/{{ $t.publicKey.key }}
{{- else }}
- --token-secret-key
- file:///pulsar/keys/{{ $t.secretKey.key }}
{{- end }}
{{- end -}}

{{/* Flags of a server (broker, proxy, Functions Worker) checking client tokens. The proxy
roles are super users too, as in Pulsar's chart: a broker authorizes both the proxy's role and
the client's (original_principal), so the client's grants decide. */}}
{{- define "magnetar.serverAuthArgs" -}}
{{- if .Values.auth.token.enabled }}
- --authentication-enabled
- --authentication-providers
- token
{{- include "magnetar.tokenKeyArgs" . }}
{{- if .Values.auth.authorization.enabled }}
- --authorization-enabled
{{- end }}
- --super-user-roles
- {{ concat .Values.auth.superUserRoles .Values.auth.proxyRoles | uniq | join "," | quote }}
- --proxy-roles
- {{ join "," .Values.auth.proxyRoles | quote }}
{{- end }}
{{- end -}}

{{/* What a server's own clients present to the brokers; (list $ "superuser"|"proxy"). */}}
{{- define "magnetar.brokerClientAuthArgs" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.auth.token.enabled }}
- --broker-client-auth-plugin
- token
- --broker-client-auth-params
- file:///pulsar/tokens/{{ index . 1 }}/token
{{- end }}
{{- end -}}

{{/* Flags of `magnetar admin` and `magnetar client` (the super user's token). */}}
{{- define "magnetar.cliAuthArgs" -}}
{{- if .Values.auth.token.enabled -}}
--auth-plugin token --auth-params file:///pulsar/tokens/superuser/token
{{- end -}}
{{- end -}}

{{/* TLS listener flags of brokers and proxies: (list $ .Values.brokers.ports). */}}
{{- define "magnetar.tlsArgs" -}}
{{- $root := index . 0 -}}
{{- $ports := index . 1 -}}
{{- if $root.Values.tls.enabled }}
- --tls-port
- {{ $ports.tls | quote }}
- --https-port
- {{ $ports.https | quote }}
- --tls-cert-file
- /pulsar/certs/tls.crt
- --tls-key-file
- /pulsar/certs/tls.key
{{- end }}
{{- end -}}

{{/* Secret volumes: (list $ "superuser"|"proxy"|"" (whose token), withKey, withCerts) */}}
{{- define "magnetar.secretVolumes" -}}
{{- $root := index . 0 -}}
{{- $token := index . 1 -}}
{{- $t := $root.Values.auth.token -}}
{{- if and $t.enabled (index . 2) }}
- name: token-key
  secret:
    secretName: {{ default $t.secretKey.secretName $t.publicKey.secretName }}
{{- end }}
{{- if and $t.enabled (eq $token "superuser") }}
- name: superuser-token
  secret:
    secretName: {{ $t.superUserToken.secretName }}
    items:
      - key: {{ $t.superUserToken.key }}
        path: token
{{- end }}
{{- if and $t.enabled (eq $token "proxy") }}
- name: proxy-token
  secret:
    secretName: {{ $t.proxyToken.secretName }}
    items:
      - key: {{ $t.proxyToken.key }}
        path: token
{{- end }}
{{- if and $root.Values.tls.enabled (index . 3) }}
- name: certs
  secret:
    secretName: {{ $root.Values.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "magnetar.secretVolumeMounts" -}}
{{- $root := index . 0 -}}
{{- $token := index . 1 -}}
{{- $t := $root.Values.auth.token -}}
{{- if and $t.enabled (index . 2) }}
- name: token-key
  mountPath: /pulsar/keys
  readOnly: true
{{- end }}
{{- if and $t.enabled (eq $token "superuser") }}
- name: superuser-token
  mountPath: /pulsar/tokens/superuser
  readOnly: true
{{- end }}
{{- if and $t.enabled (eq $token "proxy") }}
- name: proxy-token
  mountPath: /pulsar/tokens/proxy
  readOnly: true
{{- end }}
{{- if and $root.Values.tls.enabled (index . 3) }}
- name: certs
  mountPath: /pulsar/certs
  readOnly: true
{{- end }}
{{- end -}}

{{/* Scheduling ------------------------------------------------------------------------- */}}
{{/* Pod anti-affinity on the component's own pods: (list $ "bookie"). */}}
{{- define "magnetar.affinity" -}}
{{- $root := index . 0 -}}
{{- if eq $root.Values.antiAffinity "required" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: {{ $root.Values.antiAffinityTopologyKey }}
        labelSelector:
          matchLabels:
            {{- include "magnetar.selectorLabels" . | nindent 12 }}
{{- else if eq $root.Values.antiAffinity "preferred" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: {{ $root.Values.antiAffinityTopologyKey }}
          labelSelector:
            matchLabels:
              {{- include "magnetar.selectorLabels" . | nindent 14 }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations and image pull secrets of a component: (list $ values) */}}
{{- define "magnetar.scheduling" -}}
{{- $root := index . 0 -}}
{{- $v := index . 1 -}}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Start order -------------------------------------------------------------------------- */}}
{{/* An init container that returns once the ZooKeeper ensemble serves sessions (a quorum is
up): kazoo, which the image has, retries until its start timeout. */}}
{{- define "magnetar.waitForZooKeeper" -}}
- name: wait-for-zookeeper
  image: {{ include "magnetar.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - python
    - -c
    - |
      import sys
      from kazoo.client import KazooClient
      from kazoo.retry import KazooRetry
      client = KazooClient(hosts=sys.argv[1], connection_retry=KazooRetry(max_tries=-1, max_delay=2))
      client.start(timeout=600)
      client.stop()
    - {{ include "magnetar.zookeeperHosts" . | quote }}
{{- end -}}

{{/* An init container that returns once a broker behind the broker Service reports healthy
(its storage takes writes): `magnetar admin brokers healthcheck`. */}}
{{- define "magnetar.waitForBrokers" -}}
- name: wait-for-brokers
  image: {{ include "magnetar.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - sh
    - -c
    - until magnetar admin --admin-url {{ include "magnetar.brokerWebServiceUrl" . }} --timeout 5 {{ include "magnetar.cliAuthArgs" . }} brokers healthcheck; do sleep 2; done
  {{- with include "magnetar.secretVolumeMounts" (list . "superuser" false false) }}
  volumeMounts:
    {{- . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "magnetar.securityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10000
  runAsGroup: 0
  fsGroup: 0
{{- end -}}
