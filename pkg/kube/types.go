package kube

// The subset of the Kubernetes and agent-sandbox API objects that the
// manifests use, with their API field names. sandboxd keeps its own small
// structs rather than importing k8s.io/api, which would add megabytes to
// the binary for a writer; the tests decode every file strictly into the
// real types (k8s.io/api, sigs.k8s.io/agent-sandbox), so a misspelt or
// misplaced field fails them.

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       any    `yaml:"spec"`
}

type meta struct {
	Name        string            `yaml:"name,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

type podSpec struct {
	HostUsers                    *bool       `yaml:"hostUsers"`
	AutomountServiceAccountToken *bool       `yaml:"automountServiceAccountToken"`
	EnableServiceLinks           *bool       `yaml:"enableServiceLinks"`
	RestartPolicy                string      `yaml:"restartPolicy"`
	HostAliases                  []hostAlias `yaml:"hostAliases,omitempty"`
	InitContainers               []container `yaml:"initContainers,omitempty"`
	Containers                   []container `yaml:"containers"`
	Volumes                      []volume    `yaml:"volumes,omitempty"`
}

type hostAlias struct {
	IP        string   `yaml:"ip"`
	Hostnames []string `yaml:"hostnames"`
}

type container struct {
	Name            string           `yaml:"name"`
	Image           string           `yaml:"image"`
	Command         []string         `yaml:"command,omitempty"`
	Args            []string         `yaml:"args,omitempty"`
	WorkingDir      string           `yaml:"workingDir,omitempty"`
	RestartPolicy   string           `yaml:"restartPolicy,omitempty"` // Always: a native sidecar
	Env             []envVar         `yaml:"env,omitempty"`
	Ports           []port           `yaml:"ports,omitempty"`
	VolumeMounts    []volumeMount    `yaml:"volumeMounts,omitempty"`
	Resources       *resources       `yaml:"resources,omitempty"`
	StartupProbe    *probe           `yaml:"startupProbe,omitempty"`
	ReadinessProbe  *probe           `yaml:"readinessProbe,omitempty"`
	LivenessProbe   *probe           `yaml:"livenessProbe,omitempty"`
	SecurityContext *securityContext `yaml:"securityContext,omitempty"`
}

type envVar struct {
	Name      string     `yaml:"name"`
	Value     string     `yaml:"value,omitempty"`
	ValueFrom *envSource `yaml:"valueFrom,omitempty"`
}

type envSource struct {
	SecretKeyRef *secretKeyRef `yaml:"secretKeyRef"`
}

type secretKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type port struct {
	Name          string `yaml:"name,omitempty"`
	ContainerPort int    `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type volume struct {
	Name   string        `yaml:"name"`
	Secret *secretVolume `yaml:"secret"`
}

type secretVolume struct {
	SecretName  string `yaml:"secretName"`
	DefaultMode int    `yaml:"defaultMode"`
}

type resources struct {
	Requests map[string]string `yaml:"requests,omitempty"`
	Limits   map[string]string `yaml:"limits,omitempty"`
}

type probe struct {
	Exec             execAction `yaml:"exec"`
	PeriodSeconds    int        `yaml:"periodSeconds"`
	TimeoutSeconds   int        `yaml:"timeoutSeconds"`
	FailureThreshold int        `yaml:"failureThreshold"`
}

type execAction struct {
	Command []string `yaml:"command"`
}

type securityContext struct {
	RunAsUser                *int64          `yaml:"runAsUser"`
	RunAsNonRoot             *bool           `yaml:"runAsNonRoot"`
	Privileged               *bool           `yaml:"privileged"`
	AllowPrivilegeEscalation *bool           `yaml:"allowPrivilegeEscalation"`
	ProcMount                string          `yaml:"procMount"`
	SeccompProfile           *profile        `yaml:"seccompProfile"`
	AppArmorProfile          *profile        `yaml:"appArmorProfile"`
	Capabilities             *capabilitySets `yaml:"capabilities"`
}

type profile struct {
	Type             string `yaml:"type"`
	LocalhostProfile string `yaml:"localhostProfile,omitempty"`
}

type capabilitySets struct {
	Add []string `yaml:"add"`
}

type jobSpec struct {
	BackoffLimit          int         `yaml:"backoffLimit"`
	ActiveDeadlineSeconds int64       `yaml:"activeDeadlineSeconds,omitempty"`
	Template              podTemplate `yaml:"template"`
}

type podTemplate struct {
	Metadata meta    `yaml:"metadata"`
	Spec     podSpec `yaml:"spec"`
}

// templateSpec is agent-sandbox's SandboxTemplateSpec.
type templateSpec struct {
	PodTemplate             podTemplate    `yaml:"podTemplate"`
	Service                 *bool          `yaml:"service"`
	NetworkPolicyManagement string         `yaml:"networkPolicyManagement"`
	NetworkPolicy           *networkPolicy `yaml:"networkPolicy,omitempty"`
	EnvVarsInjectionPolicy  string         `yaml:"envVarsInjectionPolicy"`
}

type networkPolicy struct {
	Ingress []policyRule `yaml:"ingress"`
	Egress  []policyRule `yaml:"egress"`
}

// policyRule is a NetworkPolicy ingress (From) or egress (To) rule.
type policyRule struct {
	From  []peer       `yaml:"from,omitempty"`
	To    []peer       `yaml:"to,omitempty"`
	Ports []policyPort `yaml:"ports,omitempty"`
}

type peer struct {
	PodSelector *labelSelector `yaml:"podSelector,omitempty"`
	IPBlock     *ipBlock       `yaml:"ipBlock,omitempty"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type ipBlock struct {
	CIDR   string   `yaml:"cidr"`
	Except []string `yaml:"except,omitempty"`
}

type policyPort struct {
	Protocol string `yaml:"protocol"`
	Port     int    `yaml:"port"`
}

// warmPoolSpec is agent-sandbox's SandboxWarmPoolSpec.
type warmPoolSpec struct {
	Replicas    int32       `yaml:"replicas"`
	TemplateRef templateRef `yaml:"sandboxTemplateRef"`
}

type templateRef struct {
	Name string `yaml:"name"`
}
