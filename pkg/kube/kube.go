// Package kube writes the Kubernetes manifests of adapted images
// (`sandboxd adapt --k8s DIR`): per task a plain Pod and a Job, and for the
// agent-sandbox project (API extensions.agents.x-k8s.io/v1beta1) a
// SandboxTemplate and a SandboxWarmPool. Every file carries the security
// settings the sandbox needs, from the same facts doctor names
// (doctor.Runtime), the task's resources, probes on sandboxd's status, the
// compose sidecars as native sidecars of the Pod, and keys from Secrets by
// reference only. docs/kubernetes.md says how to run them; no cluster ran
// them where they were written.
package kube

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/pkg/layer"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Options are what the manifests name beyond the adapt manifest.
type Options struct {
	Version string // sandboxd's version, for the header and a label
	// Seccomp is images/seccomp.json, copied to DIR/profiles/ for the
	// nodes; required, since every manifest names it.
	Seccomp string
	// AgentKeysSecret holds the agents' public keys (key authorized_keys)
	// for the Pod and the Job; default DefaultAgentKeysSecret.
	AgentKeysSecret string
	// HarnessKeysSecret holds the harness's public keys (key
	// authorized_keys), mounted under the harness dir; default
	// DefaultHarnessKeysSecret.
	HarnessKeysSecret string
	// WarmPool is the SandboxWarmPool's replicas; default 1 (docs/kubernetes.md sizes it).
	WarmPool int32
}

// Defaults of Options, and the names the manifests share.
const (
	DefaultAgentKeysSecret   = "sandboxd-agent-keys"
	DefaultHarnessKeysSecret = "sandboxd-harness-keys"
	// SecretKey is the key of both Secrets.
	SecretKey = "authorized_keys"
	// HarnessKeysDir is where the harness keys' Secret is mounted: under
	// the harness dir, which the sandbox does not have, so no agent
	// process sees it.
	HarnessKeysDir = layer.HarnessDir + "/secrets"
	// HarnessLabel marks the Pods allowed to reach a sandbox's SSH port
	// under the SandboxTemplate's network policy.
	HarnessLabel = "sandboxd.org/harness"
	// ProfileFile is the seccomp profile's file under DIR, laid out as
	// under the kubelet's seccomp root.
	ProfileFile = "profiles/sandboxd-seccomp.json"
)

// Files written per task, under DIR/<name>/.
const (
	PodFile      = "pod.yaml"
	JobFile      = "job.yaml"
	TemplateFile = "sandboxtemplate.yaml"
	WarmPoolFile = "sandboxwarmpool.yaml"
)

// Write writes the manifests of every task m adapted under dir, and the
// seccomp profile they name. A task whose manifests cannot be written as
// declared (gpus, a sidecar setting with no Pod equivalent) is left out
// and named in the error; the others are still written.
func Write(dir string, m *layer.Manifest, o Options) ([]string, error) {
	if o.Seccomp == "" {
		return nil, errors.New("adapt --k8s: the manifests name sandboxd's seccomp profile, and images/seccomp.json was not found: run adapt from a checkout or set SANDBOXD_SECCOMP_PROFILE to its path")
	}
	if o.AgentKeysSecret == "" {
		o.AgentKeysSecret = DefaultAgentKeysSecret
	}
	if o.HarnessKeysSecret == "" {
		o.HarnessKeysSecret = DefaultHarnessKeysSecret
	}
	if o.WarmPool <= 0 {
		o.WarmPool = 1
	}
	prof, err := os.ReadFile(o.Seccomp)
	if err != nil {
		return nil, fmt.Errorf("adapt --k8s: seccomp profile: %w", err)
	}
	var files []string
	write := func(rel string, data []byte) error {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	if err := write(ProfileFile, prof); err != nil {
		return nil, fmt.Errorf("adapt --k8s: %w", err)
	}
	var errs []error
	for _, e := range m.Tasks {
		docs, err := manifests(e, sidecarImages(m, e.Name), o)
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", e.Name, err))
			continue
		}
		name := Name(e.Name)
		for _, f := range []string{PodFile, JobFile, TemplateFile, WarmPoolFile} {
			if err := write(filepath.Join(name, f), docs[f]); err != nil {
				errs = append(errs, fmt.Errorf("task %s: %w", e.Name, err))
				break
			}
		}
	}
	return files, errors.Join(errs...)
}

// sidecarImages are the images adapt built or kept for the compose
// services of the group that carries task.
func sidecarImages(m *layer.Manifest, taskName string) map[string]string {
	out := map[string]string{}
	for _, g := range m.Groups {
		for _, t := range g.Tasks {
			if t != taskName {
				continue
			}
			for _, s := range g.Sidecars {
				out[s.Service] = s.Image
			}
		}
	}
	return out
}

// manifests renders one task's four files.
func manifests(e layer.TaskEntry, images map[string]string, o Options) (map[string][]byte, error) {
	if e.Resources.GPUs > 0 {
		return nil, fmt.Errorf("task.toml asks for gpus = %d, and adapt --k8s writes no GPU request, since the resource name (nvidia.com/gpu, amd.com/gpu, …) and the node selection are the cluster's own: nothing is written for this task; write its Pod by hand from another task's (docs/kubernetes.md), or remove gpus", e.Resources.GPUs)
	}
	t, err := task.Load(e.Dir)
	if err != nil {
		return nil, err
	}
	sshPort, err := listenPort(t.Sandboxd.Listen)
	if err != nil {
		return nil, err
	}
	var sidecars []container
	var aliases []string
	if t.ComposeFile != "" {
		if sidecars, aliases, err = composeSidecars(t, images, sshPort); err != nil {
			return nil, err
		}
	}
	name := Name(e.Name)
	labels := map[string]string{
		"app.kubernetes.io/name":       "sandboxd",
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/managed-by": "sandboxd-adapt",
		"sandboxd.org/task":            Name(e.Name),
	}
	header := fmt.Sprintf("# Generated by sandboxd adapt %s for task %s (%s).\n"+
		"# Needs %s on every node and a Pod Security level of privileged: docs/kubernetes.md.\n"+
		"# No cluster has run this file where it was written; its fields were checked against k8s.io/api.\n",
		o.Version, e.Name, e.Image, ProfileFile)

	// A Pod and a Job are one trial each: the trial's agent keys come in
	// from its Secret at start. A warm pool's Pods start before any trial
	// is known: the agent key arrives after the claim (keys --authorize).
	trialPod := podSpecFor(e, sshPort, sidecars, aliases, o, true)
	poolPod := podSpecFor(e, sshPort, sidecars, aliases, o, false)

	docs := map[string][]byte{}
	add := func(file, comment string, obj object) error {
		b, err := render(header+comment, obj)
		docs[file] = b
		return err
	}
	if err := add(PodFile, "# One trial: kubectl create secret generic "+o.AgentKeysSecret+" --from-file="+SecretKey+"=agent.pub first.\n",
		object{APIVersion: "v1", Kind: "Pod", Metadata: meta{Name: name, Labels: labels}, Spec: trialPod}); err != nil {
		return nil, err
	}
	job := jobSpec{BackoffLimit: 0, Template: podTemplate{Metadata: meta{Labels: labels}, Spec: trialPod}}
	if e.Timeouts.AgentSec > 0 && e.Timeouts.VerifierSec > 0 {
		job.ActiveDeadlineSeconds = int64(e.Timeouts.AgentSec+e.Timeouts.VerifierSec) + startMarginSec
	}
	if err := add(JobFile, "# One trial that completes when the harness runs `sandboxd stop` (serve exits 0).\n",
		object{APIVersion: "batch/v1", Kind: "Job", Metadata: meta{Name: name, Labels: labels}, Spec: job}); err != nil {
		return nil, err
	}
	tmpl := templateSpec{
		PodTemplate:             podTemplate{Metadata: meta{Labels: labels}, Spec: poolPod},
		Service:                 ptr(true),
		NetworkPolicyManagement: "Managed",
		NetworkPolicy:           policyFor(e, sshPort),
		// Claims must not set variables: serve takes its settings from them.
		EnvVarsInjectionPolicy: "Disallowed",
	}
	if err := add(TemplateFile, "# agent-sandbox: after a claim, deliver the trial's key with `sandboxd keys --authorize` (docs/kubernetes.md).\n",
		object{APIVersion: sandboxAPI, Kind: "SandboxTemplate", Metadata: meta{Name: name, Labels: labels}, Spec: tmpl}); err != nil {
		return nil, err
	}
	pool := warmPoolSpec{Replicas: o.WarmPool, TemplateRef: templateRef{Name: name}}
	if err := add(WarmPoolFile, "# Size replicas for the claim rate and latency you need: docs/kubernetes.md.\n",
		object{APIVersion: sandboxAPI, Kind: "SandboxWarmPool", Metadata: meta{Name: name, Labels: labels}, Spec: pool}); err != nil {
		return nil, err
	}
	return docs, nil
}

// sandboxAPI is agent-sandbox's extensions API group and version.
const sandboxAPI = "extensions.agents.x-k8s.io/v1beta1"

// startMarginSec is what a Job's deadline allows beyond the task's agent
// and verifier timeouts: image pull, start-up and the harness's own steps.
const startMarginSec = 600

func render(header string, obj object) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("render %s: %w", obj.Kind, err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Name is a task's name as a Kubernetes object name: a DNS label short
// enough for the suffixes that Jobs and warm pools append (at most 52
// characters), with a hash of the task's name when it had to change, so
// that two tasks never share one.
func Name(taskName string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(taskName) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == taskName && len(out) <= maxName && out != "" {
		return out
	}
	sum := sha256.Sum256([]byte(taskName))
	if len(out) > maxName-9 {
		out = strings.TrimRight(out[:maxName-9], "-")
	}
	if out == "" {
		out = "task"
	}
	return out + "-" + hex.EncodeToString(sum[:])[:8]
}

const maxName = 52

func ptr[T any](v T) *T { return &v }
