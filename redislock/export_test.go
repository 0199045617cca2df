package redislock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Scripts lets the benchmarks send the package's scripts by hand.
func Scripts() (acquire, release string) { return acquireScript.Hash(), releaseScript.Hash() }

// RenewScript is the renewal script's hash, for a test's hook to tell a
// renewal's EVALSHA from the other commands.
func RenewScript() string { return extendScript.Hash() }

// LoadScripts loads every script of the package on c's server, so that a
// test's command log sees each sent as EVALSHA with its hash (a script
// not loaded yet is sent again as EVAL with its source).
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, s := range []*redis.Script{acquireScript, extendScript, releaseScript, retakeScript,
		grantAllScript, extendAllScript, releaseAllScript, holderScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// HolderKey is the key of the hash that holds key's label and payload.
func HolderKey(key string) string { return holderKey(key) }

// RenewNow sends l's renewal at once, as its renewal timer would: a test
// that checks what a renewal keeps need not wait for a third of a TTL.
func RenewNow(ctx context.Context, l *Lock) (refused bool, err error) {
	return l.tl.Held().Renew(ctx)
}
