package kube

import (
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/sandboxd/sandboxd/pkg/doctor"
	"github.com/sandboxd/sandboxd/pkg/layer"
)

// defaultSSHPort is serve's default --listen port.
const defaultSSHPort = 2222

// listenPort is the SSH port of a task's sandboxd.toml listen.
func listenPort(listen string) (int, error) {
	if listen == "" {
		return defaultSSHPort, nil
	}
	_, p, err := net.SplitHostPort(listen)
	if err != nil {
		return 0, fmt.Errorf("sandboxd.toml listen %q: %w", listen, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("sandboxd.toml listen %q: not a port", listen)
	}
	return n, nil
}

// podSpecFor is the task's Pod. withAgentKeys: the trial's agent keys come
// from the agents' Secret, as SANDBOXD_AUTHORIZED_KEYS by value.
func podSpecFor(e layer.TaskEntry, sshPort int, sidecars []container, aliases []string, o Options, withAgentKeys bool) podSpec {
	env := []envVar{
		// Harness keys are a file serve reads from under the harness dir.
		{Name: "SANDBOXD_HARNESS_KEYS", Value: HarnessKeysDir + "/" + SecretKey},
	}
	if withAgentKeys {
		env = append(env, envVar{Name: "SANDBOXD_AUTHORIZED_KEYS", ValueFrom: &envSource{SecretKeyRef: &secretKeyRef{Name: o.AgentKeysSecret, Key: SecretKey}}})
	}
	main := container{
		Name:  "task",
		Image: e.Image,
		Env:   env,
		Ports: []port{{Name: "ssh", ContainerPort: sshPort, Protocol: "TCP"}},
		VolumeMounts: []volumeMount{
			{Name: "harness-keys", MountPath: HarnessKeysDir, ReadOnly: true},
		},
		Resources: resourcesOf(e.Resources),
		// Start-up is the sandbox's construction; readiness is serve's own
		// word that sessions can join; liveness only that it answers.
		StartupProbe:    &probe{Exec: execAction{Command: readyCommand}, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 120},
		ReadinessProbe:  &probe{Exec: execAction{Command: readyCommand}, PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 1},
		LivenessProbe:   &probe{Exec: execAction{Command: liveCommand}, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3},
		SecurityContext: securityContextFor(),
	}
	spec := podSpec{
		// procMount Unmasked needs a user namespace for the Pod; it also
		// keeps the unmasked /proc from being the node's.
		HostUsers:                    ptr(false),
		AutomountServiceAccountToken: ptr(false),
		// Service variables would only reach serve, which ignores them.
		EnableServiceLinks: ptr(false),
		// One root filesystem, one rollout: a restarted serve refuses to
		// start (exit 125) once an agent has had the root filesystem.
		RestartPolicy:  "Never",
		InitContainers: sidecars,
		Containers:     []container{main},
		Volumes: []volume{
			{Name: "harness-keys", Secret: &secretVolume{SecretName: o.HarnessKeysSecret, DefaultMode: 0o400}},
		},
	}
	if len(aliases) > 0 {
		// A sidecar shares the Pod's network: its compose name, which the
		// baked peer targets use, is loopback here.
		spec.HostAliases = []hostAlias{{IP: "127.0.0.1", Hostnames: aliases}}
	}
	return spec
}

// The probes run sandboxd itself, from the harness dir no agent can write.
var (
	readyCommand = []string{layer.BinaryPath, "status", "--ready"}
	liveCommand  = []string{layer.BinaryPath, "status"}
)

// securityContextFor is the main container's: doctor.Runtime's facts, root
// in the Pod's user namespace, nothing added beyond the capabilities the
// construction uses.
func securityContextFor() *securityContext {
	var caps []string
	for _, c := range doctor.Runtime.Capabilities {
		caps = append(caps, c.Name)
	}
	sort.Strings(caps)
	return &securityContext{
		RunAsUser:    ptr(int64(0)),
		RunAsNonRoot: ptr(false),
		Privileged:   ptr(false),
		// Not false: that sets no_new_privs, which breaks setuid programs
		// (sudo) a task's agent user may need; the sandbox is built either way.
		AllowPrivilegeEscalation: ptr(true),
		ProcMount:                doctor.Runtime.ProcMount,
		SeccompProfile:           &profile{Type: "Localhost", LocalhostProfile: doctor.Runtime.SeccompLocalhost},
		AppArmorProfile:          &profile{Type: doctor.Runtime.AppArmor},
		Capabilities:             &capabilitySets{Add: caps},
	}
}

// resourcesOf gives the task's cpus, memory_mb and storage_mb as requests
// and limits alike (a Guaranteed Pod when all three are declared).
func resourcesOf(r layer.Resources) *resources {
	q := map[string]string{}
	if r.CPUs > 0 {
		q["cpu"] = strconv.FormatInt(int64(r.CPUs*1000+0.5), 10) + "m"
	}
	if r.MemoryMB > 0 {
		q["memory"] = strconv.FormatInt(r.MemoryMB, 10) + "Mi"
	}
	if r.StorageMB > 0 {
		q["ephemeral-storage"] = strconv.FormatInt(r.StorageMB, 10) + "Mi"
	}
	if len(q) == 0 {
		return nil
	}
	lim := map[string]string{}
	for k, v := range q {
		lim[k] = v
	}
	return &resources{Requests: q, Limits: lim}
}

// policyFor is the SandboxTemplate's network policy: SSH in from the
// harness's Pods only; out, nothing for a task whose phases are both
// no-network, else DNS and every globally routable address (sandboxd's own
// proxy enforces the task's policy inside; this keeps the Pod off the
// cluster's private ranges and the metadata service as well).
func policyFor(e layer.TaskEntry, sshPort int) *networkPolicy {
	p := &networkPolicy{
		Ingress: []policyRule{{
			From:  []peer{{PodSelector: &labelSelector{MatchLabels: map[string]string{HarnessLabel: "true"}}}},
			Ports: []policyPort{{Protocol: "TCP", Port: sshPort}},
		}},
		Egress: []policyRule{},
	}
	if e.Network.Agent.Mode == "no-network" && e.Network.Verifier.Mode == "no-network" {
		return p
	}
	p.Egress = []policyRule{
		{Ports: []policyPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 53}}},
		{To: []peer{
			{IPBlock: &ipBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}}},
			{IPBlock: &ipBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10"}}},
		}},
	}
	return p
}
