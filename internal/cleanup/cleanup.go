// Package cleanup undoes a multi-step setup that fails half-way.
//
// The shape is gVisor's: register the undo step as soon as the thing to undo
// exists, defer Clean, and Release once the whole setup has succeeded:
//
//	cu := cleanup.Make(func() { holder.Kill() })
//	defer cu.Clean()
//	… more steps that may fail …
//	cu.Release()
package cleanup

// Cleanup runs its functions in reverse order of registration unless released.
type Cleanup struct {
	fns []func()
}

// Make returns a Cleanup that will run fn.
func Make(fn func()) Cleanup {
	return Cleanup{fns: []func(){fn}}
}

// Add registers another undo step; it runs before the ones added earlier.
func (c *Cleanup) Add(fn func()) {
	c.fns = append(c.fns, fn)
}

// Clean runs the undo steps, newest first, unless Release was called.
func (c *Cleanup) Clean() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// Release forgets the undo steps: the setup succeeded and its owner now holds it.
func (c *Cleanup) Release() {
	c.fns = nil
}
