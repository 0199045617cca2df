// Package pgcancel ends a PostgreSQL statement on the server when its
// caller gives up on it, instead of closing the connection under it.
//
// A statement cut on the client (what pgx's default context handling and
// database/sql's rollback of an ended transaction do) closes the
// connection, and the server learns of it only when the backend next reads
// or writes its socket: a backend queued for a lock stays queued, and when
// the lock is granted to it, it holds the lock ahead of live callers until
// it notices. A cancel request ends the wait on the server, which answers
// the statement with SQLSTATE 57014 on a connection that stays sound.
package pgcancel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// maxPause is the longest pause between two cancel requests for one
// statement.
const maxPause = 100 * time.Millisecond

// Until sends conn's server cancel requests for the statement conn runs,
// until ended is closed (the statement returned) or grace has passed. It
// reports whether the statement ended; false means that the server did not
// answer in time (or could not be reached), and the caller must cut the
// statement.
//
// It asks more than once because a request can overtake the statement it
// is for: sent on a connection of its own, it may reach the backend before
// the statement's bytes do, and a backend that is reading its next command
// ignores it. Each request is acknowledged (the server closes its
// connection once the backend has been signalled) before the next is sent
// or Until returns, so that none is left in flight to reach a later
// statement of a direct connection. (A pooler may forward one later: a
// caller that pools the connection checks that the statement ended with
// the cancellation's 57014.)
func Until(conn *pgconn.PgConn, ended <-chan struct{}, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for pause := time.Millisecond; ; pause = min(2*pause, maxPause) {
		rctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := conn.CancelRequest(rctx)
		cancel()
		select {
		case <-ended:
			return true
		default:
		}
		if err != nil {
			return false
		}
		wait := min(pause, time.Until(deadline))
		if wait <= 0 {
			return false
		}
		t := time.NewTimer(wait)
		select {
		case <-ended:
			t.Stop()
			return true
		case <-t.C:
		}
	}
}
