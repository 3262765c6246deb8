package bwrap

// SetMapsForTest replaces the identity-map write with refuse, which returns
// the kernel's refusal, so that tests can exercise the failure path; the
// degraded single-id write still goes to the kernel.
func SetMapsForTest(refuse func(pid int) error) (restore func()) {
	old := writeIdentity
	writeIdentity = refuse
	return func() { writeIdentity = old }
}

// VersionInBinary is versionInBinary, for the external tests.
var VersionInBinary = versionInBinary
