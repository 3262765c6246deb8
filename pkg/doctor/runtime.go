package doctor

// Runtime is what a container runtime must grant for serve to build its
// sandbox (docs/container-flags.md): one fact set, from which doctor's fixes
// name the Kubernetes fields and `adapt --k8s` writes them, so that the two
// never say different things.
var Runtime = struct {
	// Capabilities are the ones the construction itself uses (writing the
	// identity map), measured by dropping each in turn. Every default set
	// but CRI-O's has them; manifests name them so that none is missing,
	// and add nothing else.
	Capabilities []Capability
	// SeccompLocalhost is the profile images/seccomp.json under the
	// kubelet's seccomp root, as a Localhost seccompProfile names it.
	SeccompLocalhost string
	// AppArmor is the profile type a Pod needs: the runtime's default
	// profile denies mount.
	AppArmor string
	// ProcMount is the /proc mount type a Pod needs: the runtime's masked
	// /proc makes a fresh proc mount "too revealing". The API server takes
	// it only with hostUsers: false.
	ProcMount string
}{
	Capabilities:     []Capability{{"SETUID", 7}, {"SETGID", 6}, {"SETFCAP", 31}},
	SeccompLocalhost: "profiles/sandboxd-seccomp.json",
	AppArmor:         "Unconfined",
	ProcMount:        "Unmasked",
}

// Capability is a Linux capability by its name without CAP_ (as Kubernetes
// and Docker spell it) and its bit in CapEff.
type Capability struct {
	Name string
	Bit  uint
}
