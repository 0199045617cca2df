package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, removeSqlockBinary) }

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the command's main logic with DATABASE_URL set to dsn (when
// not empty).
func runCmd(t testing.TB, dsn string, args ...string) result {
	t.Helper()
	return sqlockCtx(context.Background(), t, dsn, nil, args...)
}

func sqlockCtx(ctx context.Context, t testing.TB, dsn string, stdout *syncBuffer, args ...string) result {
	t.Helper()
	if stdout == nil {
		stdout = &syncBuffer{}
	}
	var stderr bytes.Buffer
	code := run(ctx, args, env{stdout: stdout, stderr: &stderr, getenv: func(k string) string {
		if k == "DATABASE_URL" {
			return dsn
		}
		return ""
	}})
	r := result{code, stdout.String(), stderr.String()}
	t.Logf("sqlock %s → exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	all := s.b.String()
	s.mu.Unlock()
	if s.onWrite != nil {
		s.onWrite(all)
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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

// wait runs sql on conn in a goroutine and returns once the server shows
// conn waiting for a lock; the statement's error goes to the channel.
func wait(t testing.TB, probe, conn *pgx.Conn, sql string, args ...any) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql, args...)
		done <- err
	}()
	// No clock of its own, which a busy machine could outrun: a wait that
	// never shows is caught by go test's -timeout.
	for {
		var n int
		if err := probe.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid(conn)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return done
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustContain(t testing.TB, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Errorf("output lacks %q", p)
		}
	}
}

func lineWith(out string, parts ...string) string {
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}

func fields(line string) []string { return strings.Fields(line) }

func itoa(n int) string { return fmt.Sprint(n) }
