package join

// StagedForks is how many copies this process has forked with their
// descriptors staged below the bound.
func StagedForks() int64 { return staging.forks.Load() }
