package join

// StagedForks is how many copies this process has forked with their
// descriptors staged below the bound.
func StagedForks() int64 { return staging.forks.Load() }

// HoldStagingSlots takes every free slot, so that the next forks find too
// few and copy the whole table; release gives them back.
func HoldStagingSlots() (release func()) {
	staging.once.Do(staging.start)
	staging.mu.Lock()
	held := staging.free
	staging.free = nil
	staging.mu.Unlock()
	return func() {
		staging.mu.Lock()
		staging.free = append(staging.free, held...)
		staging.mu.Unlock()
	}
}

// StagingBound is the bound the copies' descriptors are staged below.
func StagingBound() int {
	staging.once.Do(staging.start)
	return staging.bound
}
