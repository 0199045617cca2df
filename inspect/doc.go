// Package inspect answers the first question of every lock incident: who
// holds this lock, who waits for it, for how long, and who blocks whom.
//
// [Take] reads a [Snapshot] of the current database's advisory locks from
// pg_locks, pg_stat_activity and pg_blocking_pids — each a [Lock] with its
// key, mode, [Scope], holder or waiter [Session] and the pids it waits for —
// and the leases of package [github.com/sqlock/sqlock/lease]:
//
//	snap, err := inspect.Take(ctx, db, inspect.WithNames("booking:seat-42"))
//	for _, l := range snap.Locks {
//		fmt.Println(l.KeyLabel(), l.Granted, l.Session.PID, l.For, l.BlockedBy)
//	}
//
// PostgreSQL shows an advisory key as two 32-bit halves of a hash. Keys are
// named by [WithNames] (hashed here, no table) and by the table that
// Lockers made with [github.com/sqlock/sqlock/advisory.WithKeyNames] fill,
// one row per key per Locker, written before the key's first lock and never
// again, so the lock's hot path pays nothing after. A name is shown only if
// it hashes to the key.
//
// Seeing other roles' sessions takes a superuser or a member of
// pg_read_all_stats; without it Take returns [ErrPrivilege] rather than
// locks without holders. The command github.com/sqlock/sqlock/cmd/sqlock
// prints the same as a table; docs/inspect.md says what to watch.
package inspect
