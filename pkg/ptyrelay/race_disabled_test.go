//go:build !race

package ptyrelay_test

// raceEnabled says the race detector is on (race_enabled_test.go).
const raceEnabled = false
