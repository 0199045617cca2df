//go:build race

package main

// raceEnabled: the sqlock binary under test is built with -race too.
const raceEnabled = true
