package redislock

// Scripts lets the benchmarks send the package's scripts by hand.
func Scripts() (acquire, release string) { return acquireScript.Hash(), releaseScript.Hash() }
