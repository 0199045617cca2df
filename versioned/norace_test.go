//go:build !race

package versioned_test

const raceEnabled = false
