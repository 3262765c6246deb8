//go:build soak

package load

// Under -tags soak (make soak) the load tests run issue 7's full figures.
func init() { soak = true }
