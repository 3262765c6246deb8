//go:build soak

package tarcopy

// Under -tags soak the large-file test copies the full 1 GiB.
func init() { bigFile = 1 << 30 }
