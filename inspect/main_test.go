package inspect_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	// The examples connect to DATABASE_URL, as a program would.
	pgtest.MainWithDSN(m)
}

// session is one connection of its own, named by application_name.
func session(t testing.TB, db *pgtest.DB, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pid(conn *pgx.Conn) int { return int(conn.PgConn().PID()) }

// wait runs sql on conn in a goroutine (a lock statement that blocks) and
// returns once the server shows conn waiting for a lock. The goroutine ends
// when the statement does; its error goes to the returned channel.
func wait(t testing.TB, probe *pgx.Conn, conn *pgx.Conn, sql string, args ...any) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql, args...)
		done <- err
	}()
	waitUntil(t, fmt.Sprintf("pid %d waits", pid(conn)), func() bool {
		var n int
		if err := probe.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid(conn)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return done
}

// waitUntil polls cond until it holds, what being the condition in
// words. It keeps no clock of its own, which a busy machine could outrun:
// a condition that never comes is caught by go test's -timeout, whose
// stack dump shows this goroutine polling for what.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(5 * time.Millisecond)
	}
}

func keyArg(k advisory.Key) int64 {
	n, _ := k.Int64()
	return n
}

// locksOf returns the snapshot's locks on key, holders first.
func locksOf(s *inspect.Snapshot, key advisory.Key) []inspect.Lock {
	var out []inspect.Lock
	for _, l := range s.Locks {
		if l.Key.Compare(key) == 0 {
			out = append(out, l)
		}
	}
	return out
}

func byPID(ls []inspect.Lock, p int) (inspect.Lock, bool) {
	i := slices.IndexFunc(ls, func(l inspect.Lock) bool { return l.Session.PID == p })
	if i < 0 {
		return inspect.Lock{}, false
	}
	return ls[i], true
}

// openAs opens a *sql.DB on db as another role.
func openAs(t testing.TB, db *pgtest.DB, user string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = user
	cfg.Password = "pw"
	h := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { h.Close() })
	return h
}
