package advisory

import (
	"context"

	"github.com/sqlock/sqlock"
)

// A held advisory lock is a [sqlock.Lock]; it mints no fencing token, so it
// is not a [sqlock.Fenced].
var _ sqlock.Lock = (*Lock)(nil)

// Acquirer returns l as a [sqlock.Acquirer], for code that should not care
// which backend holds its locks: a name is the key [KeyOf](name), Acquire is
// [Locker.Lock] and TryAcquire is [Locker.TryLock], each returning a
// *[Lock].
func (l *Locker) Acquirer() sqlock.Acquirer { return byName{l} }

type byName struct{ l *Locker }

func (b byName) Acquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(b.l.Lock(ctx, KeyOf(name)))
}

func (b byName) TryAcquire(ctx context.Context, name string) (sqlock.Lock, error) {
	return asLock(b.l.TryLock(ctx, KeyOf(name)))
}

// asLock keeps a failed acquisition's nil *Lock from becoming a non-nil
// sqlock.Lock.
func asLock(lk *Lock, err error) (sqlock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return lk, nil
}
