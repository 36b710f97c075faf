{{/* Names: every object is named after the release (release "opentinker": opentinker-scheduler, ...). */}}
{{- define "opentinker.scheduler" -}}{{ .Release.Name }}-scheduler{{- end }}
{{- define "opentinker.ray" -}}{{ .Release.Name }}-ray{{- end }}
{{- define "opentinker.runsClaim" -}}{{ .Values.storage.runs.existingClaim | default (printf "%s-runs" .Release.Name) }}{{- end }}
{{- define "opentinker.dbClaim" -}}{{ .Values.storage.db.existingClaim | default (printf "%s-db" .Release.Name) }}{{- end }}

{{/* The labels every object carries. */}}
{{- define "opentinker.labels" -}}
app.kubernetes.io/part-of: opentinker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image, ".cuda" true for GPU groups. */}}
{{- define "opentinker.image" -}}
{{ .root.Values.image.repository }}:{{ .root.Values.image.tag }}{{ if .cuda }}{{ .root.Values.image.cudaSuffix }}{{ end }}
{{- end }}

{{/* The runs claim and /dev/shm of size .shm, as pod volumes. */}}
{{- define "opentinker.rayVolumes" -}}
- name: runs
  persistentVolumeClaim: {claimName: {{ include "opentinker.runsClaim" .root }}}
- name: shm
  emptyDir: {medium: Memory, sizeLimit: {{ .shm }}}
{{- end }}

{{- define "opentinker.rayMounts" -}}
- {name: runs, mountPath: {{ .Values.storage.runs.mountPath }}}
- {name: shm, mountPath: /dev/shm}
{{- end }}
