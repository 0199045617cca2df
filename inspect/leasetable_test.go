package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// A lease table whose name has capitals is the table lease made (lease
// quotes the name): Take probes and reads that table, not a case-folded
// one, and says it exists. With a lower-case twin beside it, each name
// reads its own table.
func TestTakeReadsALeaseTableWhoseNameHasCapitals(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	acquire := func(table, name string) int64 {
		t.Helper()
		if err := lease.Migrate(ctx, db.SQL(), lease.WithTable(table)); err != nil {
			t.Fatal(err)
		}
		l, err := lease.New(db.SQL(), lease.WithTable(table)).Acquire(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
		return l.Token()
	}
	leasesIn := func(table string) *inspect.Snapshot {
		t.Helper()
		snap, err := inspect.Take(ctx, db.SQL(), inspect.WithLeaseTable(table))
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	mixed := acquire("Leases_Mixed", "mixed-export")
	if snap := leasesIn("Leases_Mixed"); !snap.LeaseTable || len(snap.Leases) != 1 ||
		snap.Leases[0].Name != "mixed-export" || snap.Leases[0].Token != mixed {
		t.Fatalf("Leases_Mixed: table %t, leases %+v", snap.LeaseTable, snap.Leases)
	}
	if snap := leasesIn("leases_mixed"); snap.LeaseTable || len(snap.Leases) != 0 {
		t.Fatalf("leases_mixed does not exist: table %t, leases %+v", snap.LeaseTable, snap.Leases)
	}
	acquire("leases_mixed", "lower-export")
	if snap := leasesIn("leases_mixed"); !snap.LeaseTable || len(snap.Leases) != 1 || snap.Leases[0].Name != "lower-export" {
		t.Fatalf("leases_mixed: %+v", snap.Leases)
	}
	if snap := leasesIn("Leases_Mixed"); len(snap.Leases) != 1 || snap.Leases[0].Name != "mixed-export" {
		t.Fatalf("Leases_Mixed beside its twin: %+v", snap.Leases)
	}

	// Schema-qualified, both parts with capitals.
	if _, err := db.SQL().ExecContext(ctx, `CREATE SCHEMA "Ops"`); err != nil {
		t.Fatal(err)
	}
	ops := acquire("Ops.Leases_Mixed", "ops-export")
	if snap := leasesIn("Ops.Leases_Mixed"); !snap.LeaseTable || len(snap.Leases) != 1 || snap.Leases[0].Token != ops {
		t.Fatalf("Ops.Leases_Mixed: table %t, leases %+v", snap.LeaseTable, snap.Leases)
	}
	if snap := leasesIn("ops.Leases_Mixed"); snap.LeaseTable {
		t.Fatalf("schema ops does not exist: %+v", snap.Leases)
	}
}

// inspect names a lease table as lease itself does: the names lease.WithTable
// refuses are refused, and an accepted one is quoted exactly as lease's DDL
// quotes it.
func TestLeaseTableNamedAsLeaseNamesIt(t *testing.T) {
	for _, name := range []string{
		"sqlock_leases", "Leases_Mixed", "_x", "Ops.Leases_Mixed", "a.b", "public.sqlock_leases",
		strings.Repeat("t", 53), strings.Repeat("t", 54), strings.Repeat("s", 63) + ".t", strings.Repeat("s", 64) + ".t",
		"", ".", "a.", ".a", "a.b.c", "1abc", "a;drop table x", `"x"`, "a b", "é",
	} {
		ddl, lerr := lease.DDL(lease.WithTable(name))
		ident, ierr := inspect.LeaseTableIdent(name)
		switch {
		case (lerr == nil) != (ierr == nil):
			t.Errorf("%q: lease says %v, inspect %v", name, lerr, ierr)
		case ierr != nil:
			if !errors.Is(ierr, sqlock.ErrInvalidOption) {
				t.Errorf("%q: %v, want ErrInvalidOption", name, ierr)
			}
		case !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+ident+" ("):
			t.Errorf("%q: inspect reads %s; lease creates:\n%s", name, ident, ddl)
		}
	}
}

// A lease's holder label and payload (lease.WithHolder, lease.WithPayload)
// are in the Snapshot; a table made by an older version, without those
// columns, is read as well, its leases with neither.
func TestTakeShowsALeasesHolderAndPayload(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.SQL(), lease.WithHolder("worker-7 pid 99"), lease.WithPayload([]byte{0, 1, 0xfe}))
	l, err := m.Acquire(ctx, "labelled", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := lease.New(db.SQL()).Acquire(ctx, "plain", time.Hour); err != nil {
		t.Fatal(err)
	}
	snap, err := inspect.Take(ctx, db.SQL())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 2 {
		t.Fatalf("leases %+v", snap.Leases)
	}
	if got := snap.Leases[0]; got.Name != "labelled" || got.Holder != "worker-7 pid 99" || string(got.Payload) != "\x00\x01\xfe" {
		t.Fatalf("labelled: %+v", got)
	}
	if got := snap.Leases[1]; got.Name != "plain" || got.Holder != "" || got.Payload != nil {
		t.Fatalf("plain: %+v", got)
	}

	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE old_leases (name text PRIMARY KEY, owner uuid NOT NULL,
		token bigint NOT NULL UNIQUE, acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
		INSERT INTO old_leases VALUES ('old', gen_random_uuid(), 5, now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	snap, err = inspect.Take(ctx, db.SQL(), inspect.WithLeaseTable("old_leases"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Token != 5 || snap.Leases[0].Holder != "" || snap.Leases[0].Payload != nil {
		t.Fatalf("an older version's table: %+v", snap.Leases)
	}
}
