package txlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/lockedtx"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
)

const commitSchema = `
CREATE TABLE u (id int, CONSTRAINT u_id UNIQUE (id) DEFERRABLE INITIALLY DEFERRED);
INSERT INTO u VALUES (1);
CREATE TABLE ws (class int NOT NULL, value int NOT NULL);
INSERT INTO ws VALUES (1, 10), (2, 20);
CREATE TABLE amb (id int NOT NULL);
-- At COMMIT, a row with id 1 ends the session (pg_terminate_backend on
-- itself: the client sees FATAL 57P01 and the connection close), a row with
-- id 2 waits for advisory lock 777 (held by the test, which then cancels).
CREATE FUNCTION amb_die() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER amb_die AFTER INSERT ON amb DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.id = 1) EXECUTE FUNCTION amb_die();
CREATE FUNCTION amb_wait() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN PERFORM pg_advisory_xact_lock(777); RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER amb_wait AFTER INSERT ON amb DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.id = 2) EXECUTE FUNCTION amb_wait();
`

// A COMMIT the server refuses returns the server's error, never nil, and
// is not an ambiguous commit: a deferred unique constraint checked at
// COMMIT (23505, not retried), and a serializable conflict detected at
// COMMIT (40001: returned as it is without retries, and with the default
// policy the whole transaction runs again and succeeds).
func TestCommitErrorSurfaced(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(commitSchema)
	admin := db.Pool()
	ctx := context.Background()
	key := []advisory.Key{advisory.KeyOf("commit")}
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			calls := 0
			err := be.do(ctx, key, func(ctx context.Context, tx q) error {
				calls++
				return tx.Exec(ctx, "INSERT INTO u VALUES (1)") // fine until COMMIT
			})
			if retry.SQLState(err) != "23505" || errors.Is(err, txlock.ErrAmbiguousCommit) || calls != 1 {
				t.Fatalf("deferred constraint: got %v after %d calls", err, calls)
			}
			if got := advisoryLocks(t, admin); len(got) != 0 {
				t.Fatalf("locks left: %v", got)
			}

			serializable := txlock.WithTxOptions(&sqlSerializable)
			if be.name == bePgxPool || be.name == bePgxConn {
				serializable = txlock.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable})
			}
			for _, retried := range []bool{false, true} {
				opt := txlock.WithoutRetry()
				if retried {
					opt = txlock.WithRetry(retry.WithBackoff(retry.Constant(0)))
				}
				calls = 0
				err = be.do(ctx, key, func(ctx context.Context, tx q) error {
					calls++
					if calls == 1 {
						return writeSkew(ctx, t, admin, tx)
					}
					_, err := tx.Int(ctx, "SELECT sum(value) FROM ws WHERE class = 1")
					return err
				}, serializable, opt)
				switch {
				case !retried && (retry.SQLState(err) != "40001" || errors.Is(err, txlock.ErrAmbiguousCommit) || calls != 1):
					t.Fatalf("serializable, no retry: got %v after %d calls", err, calls)
				case retried && (err != nil || calls != 2):
					t.Fatalf("serializable, default retry: got %v after %d calls", err, calls)
				}
				db.Exec("DELETE FROM ws WHERE value = 30")
			}
		})
	}
}

var sqlSerializable = sqlTxOptionsSerializable()

// writeSkew makes tx (SERIALIZABLE) the pivot of a dangerous structure
// whose other end commits first, so that PostgreSQL fails tx at COMMIT
// ("Canceled on identification as a pivot, during commit attempt"): tx
// reads class 1 and writes class 2 while the other transaction reads class
// 2, writes class 1 and commits.
func writeSkew(ctx context.Context, t *testing.T, admin *pgxpool.Pool, tx q) error {
	other, err := admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, "SELECT sum(value) FROM ws WHERE class = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Int(ctx, "SELECT sum(value) FROM ws WHERE class = 1"); err != nil {
		return err
	}
	if err := tx.Exec(ctx, "INSERT INTO ws VALUES (2, 30)"); err != nil {
		return err
	}
	if _, err := other.Exec(ctx, "INSERT INTO ws VALUES (1, 30)"); err != nil {
		t.Fatalf("the other transaction failed first: %v", err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatalf("the other transaction failed first: %v", err)
	}
	return nil // tx's COMMIT fails
}

// A COMMIT whose outcome is unknown — the session ended (FATAL) while
// committing — is an error matching ErrAmbiguousCommit (retry.IsPermanent),
// and it is never retried, even with a policy that would retry anything.
// The test logs what really happened: both outcomes occur, which is why the
// error cannot say. A context cancelled while COMMIT waits (on a lock a
// deferred trigger takes) ends COMMIT on the server with a cancel request:
// the transaction rolled back, and the error says so (context.Canceled,
// not ambiguous); only a server that does not answer the request within
// the grace period leaves it ambiguous, and then the error says that.
func TestAmbiguousCommit(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	db.Exec(commitSchema)
	admin := db.Pool()
	key := []advisory.Key{advisory.KeyOf("ambiguous")}
	retryAll := txlock.WithRetry(retry.RetryIf(func(error) (bool, string) { return true, "anything" }),
		retry.WithBackoff(retry.Constant(0)))
	outcome := func(id int) string {
		var n int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM amb WHERE id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		db.Exec("DELETE FROM amb")
		if n > 0 {
			return "it had committed"
		}
		return "it had rolled back"
	}
	for _, name := range []string{bePgxPool, bePgxConn, beSQL, beFold, bePQ} {
		t.Run(name, func(t *testing.T) {
			t.Run("session ends during COMMIT", func(t *testing.T) {
				be := backends(t, db, name)[0] // a fresh handle: this one's connection dies
				calls := 0
				err := be.do(context.Background(), key, func(ctx context.Context, tx q) error {
					calls++
					return tx.Exec(ctx, "INSERT INTO amb VALUES (1)")
				}, retryAll)
				checkAmbiguous(t, err, calls)
				waitNoLocks(t, admin)
				t.Logf("%v — %s", err, outcome(1))
			})
			if name == bePQ {
				return // lib/pq's COMMIT takes no context: it cannot be interrupted
			}
			t.Run("context ends during COMMIT", func(t *testing.T) {
				be := backends(t, db, name)[0]
				h := holdLocks(t, db, false, advisory.KeyInt(777))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					waitForCommitBlocked(ctx, admin)
					cancel()
				}()
				calls := 0
				err := be.do(ctx, key, func(ctx context.Context, tx q) error {
					calls++
					return tx.Exec(ctx, "INSERT INTO amb VALUES (2)")
				}, retryAll)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("the cancellation is not visible: %v", err)
				}
				if calls != 1 {
					t.Fatalf("fn ran %d times after a cancelled COMMIT", calls)
				}
				ambiguous := errors.Is(err, txlock.ErrAmbiguousCommit)
				if ambiguous {
					checkAmbiguous(t, err, calls)
				}
				h.release()
				waitNoLocks(t, admin)
				waitIdle(t, admin)
				got := outcome(2)
				if !ambiguous && got != "it had rolled back" {
					t.Fatalf("%v, but %s", err, got)
				}
				t.Logf("%v — %s", err, got)
			})
		})
	}
}

// waitIdle waits until no other session of the database is inside a
// transaction.
func waitIdle(t *testing.T, admin *pgxpool.Pool) {
	for {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func checkAmbiguous(t *testing.T, err error, calls int) {
	t.Helper()
	var amb *lockedtx.AmbiguousCommitError
	if !errors.As(err, &amb) || !errors.Is(err, txlock.ErrAmbiguousCommit) || !retry.IsPermanent(err) {
		t.Fatalf("got %v (%T), want an ambiguous commit", err, err)
	}
	if calls != 1 {
		t.Fatalf("fn ran %d times: an ambiguous commit was retried", calls)
	}
}

// waitForCommitBlocked waits until a session of the database is blocked on
// a lock while running COMMIT.
func waitForCommitBlocked(ctx context.Context, admin *pgxpool.Pool) {
	for ctx.Err() == nil {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE 'commit%'`).Scan(&n)
		if err != nil || n > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fn swallowing a statement's error and returning nil leaves an aborted
// transaction: COMMIT turns into ROLLBACK. That is reported (pgx:
// ErrTxCommitRollback, lib/pq: its ErrInFailedTransaction) and is not
// ambiguous — nothing was committed.
func TestCommitOfAbortedTransaction(t *testing.T) {
	noLeaks(t)
	db := pgtest.New(t)
	ctx := context.Background()
	key := []advisory.Key{advisory.KeyOf("aborted")}
	for _, be := range backends(t, db) {
		t.Run(be.name, func(t *testing.T) {
			calls := 0
			err := be.do(ctx, key, func(ctx context.Context, tx q) error {
				calls++
				_ = tx.Exec(ctx, "SELECT 1/0") // error ignored
				return nil
			})
			if err == nil || errors.Is(err, txlock.ErrAmbiguousCommit) || calls != 1 {
				t.Fatalf("got %v after %d calls", err, calls)
			}
			if be.name != bePQ && !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("got %v, want pgx.ErrTxCommitRollback", err)
			}
			t.Logf("%s: %v", be.name, err)
		})
	}
}
