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
