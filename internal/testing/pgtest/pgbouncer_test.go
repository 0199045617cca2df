package pgtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func backendPID(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()",
		pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPgBouncerSessionMode: each client keeps one backend of its own.
func TestPgBouncerSessionMode(t *testing.T) {
	db := New(t)
	dsn := StartPgBouncer(t, db, "session")
	a, b := connect(t, dsn), connect(t, dsn)
	pa := backendPID(t, a)
	pb := backendPID(t, b)
	if pa == pb {
		t.Fatalf("two session-mode clients share backend %d", pa)
	}
	for i := 0; i < 5; i++ {
		if p := backendPID(t, a); p != pa {
			t.Fatalf("session-mode client moved from backend %d to %d", pa, p)
		}
	}
	var name string
	if err := a.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != db.Name {
		t.Fatalf("connected to %s through pgbouncer, want %s", name, db.Name)
	}
}

// TestPgBouncerTransactionMode: with one server connection, session state
// set by one client is seen by another, which is why session advisory
// locks cannot work behind transaction pooling.
func TestPgBouncerTransactionMode(t *testing.T) {
	db := New(t)
	b, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: "transaction", PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	x, y := connect(t, b.DSN), connect(t, b.DSN)
	if _, err := x.Exec(ctx, "SELECT set_config('pgtest.probe', 'from-x', false)"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := y.QueryRow(ctx, "SELECT coalesce(current_setting('pgtest.probe', true), '')",
		pgx.QueryExecModeSimpleProtocol).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "from-x" {
		t.Fatalf("client y saw %q: transaction pooling with one server connection must share it", got)
	}
	if px, py := backendPID(t, x), backendPID(t, y); px != py {
		t.Fatalf("pool_size 1 in transaction mode, yet backends %d and %d", px, py)
	}
}

func TestPgBouncerCloseAndBadMode(t *testing.T) {
	db := New(t)
	if _, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: "bogus"}); err == nil {
		t.Fatal("RunPgBouncer accepted pool mode bogus")
	}
	b, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: "session"})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := b.PID(), b.Dir()
	if !serverproc.Alive(pid) {
		t.Fatalf("pgbouncer %d not running", pid)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if serverproc.Alive(pid) {
		t.Fatalf("pgbouncer %d still running after Close", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s not removed after Close: %v", dir, err)
	}
	if b.Close() != nil {
		t.Fatal("second Close failed")
	}
	if _, err := pgx.Connect(context.Background(), b.DSN); err == nil {
		t.Fatal("connected through a closed pgbouncer")
	}
}

const pgbouncerChildEnv = "PGTEST_PGBOUNCER_CHILD"

// TestPgBouncerNothingOutlivesTheBinary runs this test again as a child
// process that starts PgBouncer and is then killed with SIGKILL; the
// watchdog must stop PgBouncer and remove its directory.
func TestPgBouncerNothingOutlivesTheBinary(t *testing.T) {
	if os.Getenv(pgbouncerChildEnv) != "" {
		db := New(t)
		b, err := RunPgBouncer(context.Background(), db.DSN, PgBouncerOptions{Mode: "transaction"})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("PGBOUNCER %d %s %s\n", b.PID(), b.Dir(), db.Name)
		time.Sleep(time.Minute) // killed by the parent long before
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPgBouncerNothingOutlivesTheBinary$", "-test.v")
	cmd.Env = append(os.Environ(), pgbouncerChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var pid int
	var dir, dbName string
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PGBOUNCER %d %s %s", &pid, &dir, &dbName); err == nil {
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child did not report its pgbouncer")
	}
	if !serverproc.Alive(pid) {
		t.Fatalf("pgbouncer %d not running in the child", pid)
	}
	cmd.Process.Kill()
	go func() {
		for sc.Scan() {
		}
	}()
	cmd.Wait()
	// The child could not drop its database; do it here.
	defer Shared(t).DropDatabase(context.Background(), dbName)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, statErr := os.Stat(dir)
		if !serverproc.Alive(pid) && os.IsNotExist(statErr) {
			t.Logf("pgbouncer %d gone and %s removed after SIGKILL of the test binary", pid, dir)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGKILL: pgbouncer %d alive %v, dir stat %v", pid, serverproc.Alive(pid), statErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
