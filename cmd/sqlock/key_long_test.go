package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// A name too long for a line is wrapped under its label, called "name" in
// the lines that explain the key, and split into adjacent string constants
// in the SQL; every line fits 100 columns, the output is the golden file's,
// and the SQL as printed takes the name's lock. A holder's long
// application name is cut with "…".
func TestKeyWrapsALongNameToFitAHundredColumns(t *testing.T) {
	name := "tenant-0042:invoice:2026-11-30:customer-'o'brien':line-items:reconciliation-batch-000017:" +
		"retry-window-7:shard-3"
	r := runCmd(t, "", "key", name)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	golden := filepath.Join("testdata", "key-long.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Errorf("output differs from %s (go test -run %s -update rewrites it):\n%s", golden, t.Name(), r.stdout)
	}
	fits(t, r.stdout)

	// The SQL as printed is the same lock.
	lines := strings.Split(r.stdout, "\n")
	start := slicesIndex(lines, "hashtextextended(  -- transaction")
	if start < 0 {
		t.Fatalf("no wrapped SQL in:\n%s", r.stdout)
	}
	var sql strings.Builder
	sql.WriteString("SELECT pg_advisory_xact_lock(hashtextextended(\n")
	for _, l := range lines[start+1:] {
		sql.WriteString(l + "\n")
		if strings.HasSuffix(l, ", 0));") {
			break
		}
	}
	ctx := context.Background()
	db := pgtest.New(t)
	holder := session(t, db, strings.Repeat("reconciliation-worker-", 3))
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sql.String()); err != nil {
		t.Fatalf("%v in:\n%s", err, sql.String())
	}
	r = runCmd(t, db.DSN, "key", name)
	l := lineWith(r.stdout, "held by pid "+itoa(pid(holder)))
	if !strings.Contains(l, "reconciliation-worker-") || !strings.Contains(l, "…") || !strings.Contains(l, "xact") {
		t.Errorf("the printed SQL did not take advisory.KeyOf's lock (%v), or the holder line is %q:\n%s",
			advisory.KeyOf(name), l, r.stdout)
	}
	fits(t, r.stdout)
}

func fits(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
}

func slicesIndex(lines []string, suffix string) int {
	for i, l := range lines {
		if strings.HasSuffix(l, suffix) {
			return i
		}
	}
	return -1
}
