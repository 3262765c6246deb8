//go:build race

package ptyrelay_test

// raceEnabled says the race detector is on: its sync.Pool drops a share of
// what it is given, on purpose.
const raceEnabled = true
