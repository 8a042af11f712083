//go:build !race

package rebound_test

// raceEnabled says the race detector is on: load tests make fewer calls.
const raceEnabled = false
