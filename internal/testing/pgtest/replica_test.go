package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock/internal/testing/serverproc"
)

// TestReplicaSetStreamsAndFailsOver: a row written on the primary is read
// on the standby; after the primary is stopped hard and the standby
// promoted, a pool on the set's DSN writes to the standby; Close removes
// both servers' processes and directories. Synchronous and asynchronous.
func TestReplicaSetStreamsAndFailsOver(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync", false: "async"}[sync], func(t *testing.T) {
			ctx := context.Background()
			r, err := StartReplicaSet(ctx, ReplicaOptions{Synchronous: sync})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			db := r.NewDB(t)
			db.Exec(`CREATE TABLE t (id int PRIMARY KEY, v text)`)
			pool := db.OpenPool(nil)
			if _, err := pool.Exec(ctx, `INSERT INTO t VALUES (1, 'on the primary')`); err != nil {
				t.Fatal(err)
			}
			if err := r.WaitReplay(ctx); err != nil {
				t.Fatal(err)
			}
			standby := replicaConn(t, WithDatabase(r.Standby.AdminDSN(), db.Name))
			var v string
			if err := standby.QueryRow(ctx, `SELECT v FROM t WHERE id = 1`).Scan(&v); err != nil || v != "on the primary" {
				t.Fatalf("standby reads %q, %v", v, err)
			}
			var mode string
			if err := pool.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if (mode != "") != sync {
				t.Fatalf("synchronous_standby_names = %q on the primary", mode)
			}
			if _, err := standby.Exec(ctx, `INSERT INTO t VALUES (2, 'refused')`); pgErrCode(err) != "25006" {
				t.Fatalf("a write on the unpromoted standby: %v, want read_only_sql_transaction", err)
			}
			standby.Close(ctx)

			primaryPID, primaryDir, standbyDir := r.Primary.PID(), r.Primary.Dir(), r.Standby.Dir()
			start := time.Now()
			if err := r.Failover(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("failover (immediate stop + promotion) took %v", time.Since(start).Round(time.Millisecond))
			if serverproc.Alive(primaryPID) {
				t.Fatal("the primary still runs after KillPrimary")
			}
			// The pool's connections to the primary are broken; a new one
			// skips the dead primary and lands on the promoted standby.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err = pool.Exec(ctx, `INSERT INTO t VALUES (2, 'on the promoted standby')`)
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // a retry's pause, not a synchronisation
			}
			if err != nil {
				t.Fatalf("no write after the failover: %v", err)
			}
			var n int
			var port int
			if err := pool.QueryRow(ctx, `SELECT count(*), current_setting('port')::int FROM t`).Scan(&n, &port); err != nil {
				t.Fatal(err)
			}
			if n != 2 || port != r.Standby.Port() {
				t.Fatalf("%d rows on port %d after the failover, want 2 on the standby's %d", n, port, r.Standby.Port())
			}
			standbyPID := r.Standby.PID()
			pool.Close()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if serverproc.Alive(standbyPID) {
				t.Fatal("the standby still runs after Close")
			}
			for _, d := range []string{primaryDir, standbyDir} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Fatalf("%s left behind: %v", d, err)
				}
			}
		})
	}
}

func replicaConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pgErrCode(err error) string {
	if pe, ok := err.(*pgconn.PgError); ok {
		return pe.Code
	}
	return ""
}
