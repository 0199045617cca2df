package lease_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// child starts the test binary as a worker with the given role and
// environment.
func child(t testing.TB, role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	return cmd
}

// exclusionRun is one configuration of TestExclusionAcrossProcesses.
type exclusionRun struct {
	name string
	dsn  func(t *testing.T, db *pgtest.DB) (dsn string, poll string)
	n    int    // sections per goroutine
	ttl  string // the leases' TTL
}

// TestExclusionAcrossProcesses: 4 OS processes × 8 goroutines × N
// acquisitions on 4 lease names with random hold times, directly (LISTEN;
// TTL 500 ms) and through PgBouncer in transaction mode (polling; TTL 1 s);
// the database checks that no two sections of a name overlap and that each
// holder's token is greater than the one before it. N is 160 directly
// (5,120 acquisitions, 14 s on two quiet cores under -race) and 48 through
// PgBouncer (1,536), where every waiter polls every 5–10 ms: 28 pollers
// keep two cores busy, so 4,096 there took 64 s, the largest share of CI's
// run. Each section is a handover under contention, and overlaps are
// counted by the database, so the run proves exclusion at any N; a soak
// sets LEASE_EXCLUSION_N, which overrides N for both.
func TestExclusionAcrossProcesses(t *testing.T) {
	leakCheck(t)
	runs := []exclusionRun{
		{"direct", func(t *testing.T, db *pgtest.DB) (string, string) { return db.DSN, "" }, 160, "500ms"},
		// Through PgBouncer, beside two CPU hogs, the fastest round trip a
		// Manager measured was once 68 ms, and it refused a 500 ms TTL as
		// shorter than 8 of them: 1 s leaves room for 125 ms.
		{"pgbouncer-transaction", func(t *testing.T, db *pgtest.DB) (string, string) {
			return pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec", "10ms"
		}, 48, "1s"},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			db := newDB(t)
			n := r.n
			if v, err := strconv.Atoi(os.Getenv("LEASE_EXCLUSION_N")); err == nil && v > 0 {
				n = v
			}
			dsn, poll := r.dsn(t, db)
			cfg := exclusiontest.Config{Procs: 4, Goroutines: 8, Keys: 4, N: n, Worker: func(p int) *exec.Cmd {
				return child(t, "exclusion", "LEASE_DSN="+dsn, "LEASE_POLL="+poll, "LEASE_TTL="+r.ttl,
					"LEASE_BACKEND="+[]string{"sql", "pgx"}[p%2])
			}}
			sum := exclusiontest.Run(t, db, cfg)
			t.Logf("%d processes × %d goroutines × %d sections on %d names = %d acquisitions, 0 overlaps, tokens increasing, %d leases lost under load (all reported before the server let go), in %v",
				cfg.Procs, cfg.Goroutines, n, cfg.Keys, sum.Sections, sum.Lost, sum.Took.Round(time.Millisecond))
		})
	}
}

// TestPausedHolderIsFencedOut: a child process holding a lease is stopped
// with SIGSTOP for 2 × TTL. Another holder gets the lease, with a larger
// token, and writes. After
// SIGCONT the child's Lost has fired before it tries to write, its guarded
// write is refused with ErrLost, its hand-fenced update matches no row, and
// its Release changes nothing. Directly and through PgBouncer in
// transaction mode.
func TestPausedHolderIsFencedOut(t *testing.T) {
	leakCheck(t)
	db := newDB(t)
	db.Exec(`CREATE TABLE writes (token bigint, who text)`)
	db.Exec(`CREATE TABLE register (id int PRIMARY KEY, value text, fence bigint NOT NULL)`)
	db.Exec(`INSERT INTO register VALUES (1, 'initial', 0)`)
	pgb := pgtest.StartPgBouncer(t, db, "transaction") + "&default_query_exec_mode=exec"
	conn := admin(t, db)
	ctx := context.Background()
	ttl := max(500*time.Millisecond, 50*db.Latency())
	for _, c := range []struct{ name, dsn, poll, backend string }{
		{"direct-pgxpool", db.DSN, "", "pgx"},
		{"direct-sql", db.DSN, "", "sql"},
		{"pgbouncer-transaction", pgb, "10ms", "pgx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "paused:" + c.name
			cmd := child(t, "paused", "LEASE_DSN="+c.dsn, "LEASE_POLL="+c.poll, "LEASE_BACKEND="+c.backend,
				"LEASE_NAME="+name, "LEASE_TTL="+ttl.String())
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(stdout)
			var childToken int64
			if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ACQUIRED ") {
				t.Fatalf("child: %q", lines.Text())
			}
			childToken, _ = strconv.ParseInt(strings.TrimPrefix(lines.Text(), "ACQUIRED "), 10, 64)
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			pool := openPool(t, c.dsn)
			var opts []lease.Option
			if c.poll != "" {
				opts = append(opts, lease.WithPolling(10*time.Millisecond))
			}
			m := lease.New(pool, append(opts, lease.WithTimeout(time.Minute))...)
			l, err := m.Acquire(ctx, name, ttl)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(paused)
			defer l.Release(ctx)
			if l.Token() <= childToken {
				t.Fatalf("took over with token %d after the child's %d", l.Token(), childToken)
			}
			if _, err := conn.Exec(ctx, `UPDATE register SET value = 'new holder', fence = $1 WHERE id = 1 AND fence <= $1`, l.Token()); err != nil {
				t.Fatal(err)
			}
			tx := must[pgx.Tx](t)(pool.Begin(ctx))
			defer tx.Rollback(ctx)
			if err := l.Guard(ctx, tx); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO writes VALUES ($1, 'new holder')`, l.Token()); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(paused.Add(2 * ttl))) // the fault: the pause lasts 2 × TTL
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			io.WriteString(stdin, "write\n")
			if !lines.Scan() {
				t.Fatal("child said nothing")
			}
			if got, want := lines.Text(), "RESULT lost=true guard=ErrLost fenced=0 release=true"; got != want {
				t.Fatalf("child: %s, want %s", got, want)
			}
			var value string
			var fence int64
			if err := conn.QueryRow(ctx, `SELECT value, fence FROM register WHERE id = 1`).Scan(&value, &fence); err != nil {
				t.Fatal(err)
			}
			var stale int
			conn.QueryRow(ctx, `SELECT count(*) FROM writes WHERE who = 'paused holder'`).Scan(&stale)
			if value != "new holder" || fence != l.Token() || stale != 0 {
				t.Fatalf("register %q fence %d, %d stale writes", value, fence, stale)
			}
			if r := readRow(t, conn, name); r.token != l.Token() || !r.live {
				t.Fatalf("the new holder's lease was disturbed: %+v", r)
			}
			t.Logf("TTL %v: taken over %v after the pause; the paused holder's writes refused", ttl, took.Round(time.Millisecond))
		})
	}
}
