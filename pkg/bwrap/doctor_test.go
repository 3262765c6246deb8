package bwrap

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Lesson 51: a join that seccomp forbids is named with its flag, in the
// words of nsenter and in those of sandboxd's own join (pkg/join).
func TestLesson51_DoctorNamesTheSetnsFlag(t *testing.T) {
	for _, msg := range []string{
		"nsenter: reassociate to namespace 'ns/user' failed: Operation not permitted",
		"could not join the sandbox's namespaces (operation not permitted): the sandbox may have ended; see sandboxd status",
	} {
		c := classify(errors.New(msg))
		assert.Equal(t, "setns (seccomp)", c.Name, msg)
		assert.Contains(t, c.Fix, "images/seccomp.json", msg)
	}
}
