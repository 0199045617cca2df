package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("PGTEST_HELPER_MODE"); mode != "" {
		helperProcess(m, mode)
		return
	}
	Main(m)
}

func TestDatabasesAreIsolated(t *testing.T) {
	a, b := New(t), New(t)
	if a.Name == b.Name {
		t.Fatal("two tests got the same database")
	}
	a.Exec("CREATE TABLE only_in_a (id int)")
	ctx := context.Background()
	var n int
	if err := b.Pool().QueryRow(ctx,
		"SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table of one test's database is visible in another's")
	}
	var enc, coll string
	if err := a.SQL().QueryRowContext(ctx,
		"SELECT pg_encoding_to_char(encoding), datcollate FROM pg_database WHERE datname = current_database()").
		Scan(&enc, &coll); err != nil {
		t.Fatal(err)
	}
	if enc != "UTF8" || coll != "C" {
		t.Fatalf("database encoding %s collation %s, want UTF8 and C", enc, coll)
	}
}

func TestDatabaseDroppedAfterTest(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) { name = New(t).Name })
	var n int
	conn, err := pgx.Connect(context.Background(), Shared(t).AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:p@h:5/db?sslmode=disable", "postgres://u:p@h:5/x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/x"},
		{"host=h dbname=db", "host=h dbname=db dbname=x"},
	} {
		if got := WithDatabase(tc.in, "x"); got != tc.want {
			t.Errorf("WithDatabase(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	cfg, err := pgx.ParseConfig(WithDatabase("host=h dbname=db", "x"))
	if err != nil || cfg.Database != "x" {
		t.Fatalf("keyword form: last dbname must win, got %v %v", cfg, err)
	}
}

func TestTerminateBackend(t *testing.T) {
	db := New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := db.Cluster.TerminateBackend(ctx, conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection still works after its backend was terminated")
	}
}

func TestStopStartRestart(t *testing.T) {
	c := NewCluster(t, Options{})
	db := c.NewDB(t)
	ctx := context.Background()
	pool := db.Pool()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	first := c.PID()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if serverproc.Alive(first) {
		t.Fatal("postmaster still running after Stop")
	}
	if err := pool.Ping(ctx); err == nil {
		t.Fatal("ping succeeded while the server was stopped")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pool did not recover after restart: %v", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.PID() == first || c.PID() == 0 {
		t.Fatalf("restart did not start a new postmaster (pid %d → %d)", first, c.PID())
	}
}

func TestLeversNeedOwnership(t *testing.T) {
	c := &Cluster{adminDSN: "postgres://nowhere/"}
	if err := c.Stop(); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Stop on a DATABASE_URL cluster: %v, want ErrNotOwned", err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Start on a DATABASE_URL cluster: %v, want ErrNotOwned", err)
	}
}

// TestNothingOutlivesTheBinary runs a child test binary that starts a
// cluster and then dies in each way a test binary can, and counts the
// server's processes afterwards.
func TestNothingOutlivesTheBinary(t *testing.T) {
	if _, err := findBinDir(); err != nil {
		t.Fatalf("needs PostgreSQL server binaries: %v", err)
	}
	for _, mode := range []string{"close", "exit", "panic", "sigkill", "timeout"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"-test.run=^$"}
			if mode == "timeout" {
				// go test -timeout: the testing package panics the binary.
				args = []string{"-test.run=^TestHelperSleeps$", "-test.timeout=2s"}
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "PGTEST_HELPER_MODE="+mode)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// The child dies only when told to, after the processes were
			// counted: however slow this machine is, the count sees them.
			goAhead, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if mode == "timeout" {
				cmd.Stderr = nil
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			var dir string
			var pid, pgid int
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "CLUSTER %s %d %d", &dir, &pid, &pgid); err == nil {
					break
				}
			}
			if pid == 0 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("helper did not report its cluster")
			}
			if n := countGroup(pgid); n < 2 {
				cmd.Process.Kill()
				t.Fatalf("expected the watchdog and postgres processes in group %d, counted %d", pgid, n)
			}
			if mode == "sigkill" {
				cmd.Process.Kill()
			} else if _, err := io.WriteString(goAhead, "go\n"); err != nil {
				t.Fatal(err)
			}
			go func() {
				for sc.Scan() {
				}
			}()
			cmd.Wait()
			deadline := time.Now().Add(30 * time.Second)
			for {
				n := countGroup(pgid)
				_, statErr := os.Stat(dir)
				if n == 0 && !serverproc.Alive(pid) && os.IsNotExist(statErr) {
					t.Logf("%s: 0 processes left in group %d, %s removed", mode, pgid, dir)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %d processes left in group %d, postmaster alive %v, dir stat %v",
						mode, n, pgid, serverproc.Alive(pid), statErr)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func TestHelperSleeps(t *testing.T) {
	if os.Getenv("PGTEST_HELPER_MODE") == "" {
		t.Skip("only runs as the child of TestNothingOutlivesTheBinary")
	}
	time.Sleep(time.Minute)
}

func helperProcess(m *testing.M, mode string) {
	c, err := StartCluster(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Printf("CLUSTER %s %d %d\n", c.Dir(), c.PID(), c.proc.WatchdogPID())
	if mode != "sigkill" {
		// Wait for the parent to count the processes.
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	switch mode {
	case "close":
		c.Close()
		os.Exit(0)
	case "exit":
		os.Exit(1)
	case "panic":
		panic("helper panics with a cluster running")
	case "sigkill":
		time.Sleep(time.Minute)
	case "timeout":
		os.Exit(m.Run()) // TestHelperSleeps outlives -test.timeout
	}
}

// countGroup counts live processes in a process group (the watchdog's: it
// and every postgres process it starts share it).
func countGroup(pgid int) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && serverproc.Alive(pid) {
			n++
		}
	}
	return n
}

// TestLatency: the measured latency is positive and below the time the
// measurement took (it is a round trip, not a guess).
func TestLatency(t *testing.T) {
	db := New(t)
	start := time.Now()
	lat := db.Latency()
	if lat < 100*time.Microsecond || lat > time.Since(start) {
		t.Fatalf("Latency() = %v after %v", lat, time.Since(start))
	}
	t.Logf("latency now: %v", lat)
}

// fatalRecorder is a testing.TB whose Fatalf records instead of ending the
// test, for helpers whose failure is the behaviour under test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}

// TestLatencyWatch: a watch reports the slowest of its samples, and one
// whose connection dies fails the test at Stop rather than report its last
// sample as the server's slowest.
func TestLatencyWatch(t *testing.T) {
	db := New(t)
	ctx := context.Background()
	w := db.WatchLatency()
	time.Sleep(20 * time.Millisecond)
	if slowest := w.Stop(); slowest <= 0 {
		t.Fatalf("slowest round trip %v after 20 ms of sampling", slowest)
	}

	rec := &fatalRecorder{TB: t}
	dead := db.Cluster.NewDB(rec)
	w = dead.WatchLatency()
	conn, err := pgx.Connect(ctx, dead.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pids []uint32
	for len(pids) == 0 {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
		if err != nil {
			t.Fatal(err)
		}
		if pids, err = pgx.CollectRows(rows, pgx.RowTo[uint32]); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		if err := db.Cluster.TerminateBackend(ctx, pid); err != nil {
			t.Fatal(err)
		}
	}
	// The watch samples every 5 ms: wait until it has seen the loss, then
	// stop it.
	<-w.done
	w.Stop()
	if rec.fatal == "" {
		t.Fatal("Stop after the watch's connection died did not fail the test")
	}
	t.Log(rec.fatal)
}
