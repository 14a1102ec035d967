//go:build !race

package main

// raceEnabled is true when the tests run with -race: TestMain then builds
// the command with -race too.
const raceEnabled = false
