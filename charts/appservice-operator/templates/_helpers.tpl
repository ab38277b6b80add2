{{/* Name of every object: fullnameOverride, else the chart's name (one operator per cluster). */}}
{{- define "appservice-operator.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The selector label of the operator's Pods (the same as deploy/). */}}
{{- define "appservice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{/* Labels of every object: the selector label and Helm's usual ones. */}}
{{- define "appservice-operator.labels" -}}
{{ include "appservice-operator.selectorLabels" . }}
{{ include "appservice-operator.helmLabels" . }}
{{- end -}}

{{/* Helm's usual labels (release bookkeeping), without the selector label. */}}
{{- define "appservice-operator.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image reference: repository@digest, else repository:tag (tag default appVersion). */}}
{{- define "appservice-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount's user name, as the apiserver authenticates it. */}}
{{- define "appservice-operator.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "appservice-operator.fullname" . }}
{{- end -}}

{{/*
Rules on the namespaced resources the operator reads and writes: the ClusterRole's in cluster-wide
mode, each watched namespace's Role otherwise. Keep in step with deploy/rbac.yaml (the render test
compares them).
*/}}
{{- define "appservice-operator.namespacedRules" -}}
# Informer (list, watch); read from the API before any Pod is deleted (get: a cache that lags
# must not delete Pods); finalizer added and removed with JSON patches.
- apiGroups: ["apps.our-org.com"]
  resources: ["appservices"]
  verbs: ["get", "list", "watch", "patch"]
# Status is written only through the status subresource (merge patch).
- apiGroups: ["apps.our-org.com"]
  resources: ["appservices/status"]
  verbs: ["patch"]
# Owned Pods: informer, create, delete; cleanup confirms deletion with a list; patch adopts
# orphans (--cascade=orphan) and puts back labels removed by hand (never the Pod's spec); get: a
# create answered AlreadyExists reads the Pod of that name.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Owned Service: informer, server-side apply (patch; creating through apply also needs create),
# delete; cleanup reads it back.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Owned PodDisruptionBudget: informer, server-side apply, delete; get (one of the name not in
# the cache may be someone else's: never taken over).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# ResourceQuotas: informer; a change retries at once the Pod creates a quota refused.
- apiGroups: [""]
  resources: ["resourcequotas"]
  verbs: ["list", "watch"]
# Events about AppServices, in their namespaces; repeats patch the Event's series count.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* Secure /metrics: TokenReview and SubjectAccessReview are cluster-scoped in every mode. */}}
{{/*
Start-up check of the finalizer policy (lib/appservice/policy.ts): get on the policy and its
binding, by their fixed names only (granted with or without finalizerPolicy.enabled: the operator
always looks). Cluster-scoped in both modes.
*/}}
{{- define "appservice-operator.finalizerPolicyRules" -}}
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["mutatingadmissionpolicies", "mutatingadmissionpolicybindings"]
  resourceNames: ["appservice-operator-finalizer"]
  verbs: ["get"]
{{- end -}}

{{- define "appservice-operator.metricsAuthRules" -}}
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end -}}
