//go:build soak

package daemon

// Under -tags soak the large-file copy is the full 1 GiB.
func init() { cpBigFile = 1 << 30 }
