package advisory

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlock/sqlock/internal/keynames"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// WithKeyNames records the text of each key made by [KeyOf] or [KeyText],
// so that [github.com/sqlock/sqlock/inspect] and the sqlock command can show
// "booking:seat-42" where pg_locks shows two 32-bit halves of a hash. The
// first acquisition of each such key by this Locker writes one row to the
// table sqlock_key_names (created if missing), on the lock's own connection
// just before the lock statement: one round trip per key per Locker, none
// after. Keys without text (KeyInt, KeyPair) write nothing. A failure to
// write (no CREATE or INSERT privilege) is logged once ([WithLogger]) and
// turns the recording off; it never fails an acquisition. Off by default.
func WithKeyNames() Option {
	return func(c *config) error {
		c.keyNames = true
		return nil
	}
}

// keyNames is the per-Locker record of the keys whose names were written.
type keyNames struct {
	seen sync.Map // int64 key → struct{}
	off  atomic.Bool
}

// record writes key's name once, on sess before it takes a lock (so a
// failure touches no held lock), bounded by end. A statement error leaves
// the session usable (no transaction is open); a broken connection is found
// by the lock statement that follows.
func (n *keyNames) record(ctx context.Context, sess session, key Key, end time.Time, log *slog.Logger) {
	if key.text == "" || n.off.Load() {
		return
	}
	if _, done := n.seen.LoadOrStore(key.v, struct{}{}); done {
		return
	}
	var count int64
	args := []any{key.v, key.text}
	err := sess.queryRow(ctx, end, keynames.Insert, args, &count)
	if pgerror.Code(err) == "42P01" { // undefined_table: create it, once
		// Another process may create it at the same moment (23505 on
		// pg_type): the insert decides.
		sess.exec(ctx, end, keynames.DDL)
		err = sess.queryRow(ctx, end, keynames.Insert, args, &count)
	}
	if err != nil && pgerror.Code(err) != "" && !pgerror.ConnectionLost(err) {
		// The server refused (privilege, read-only): stop trying.
		if n.off.CompareAndSwap(false, true) {
			log.Warn("sqlock advisory: cannot record key names; WithKeyNames is off for this Locker",
				slog.String("table", keynames.Table), slog.String("error", err.Error()))
		}
	} else if err != nil {
		n.seen.Delete(key.v) // not written: try again next time
	}
}
