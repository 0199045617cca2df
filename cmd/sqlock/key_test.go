package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// sqlock key prints the key SQL's hashtextextended gives and advisory.KeyOf
// makes, and names the session holding it.
func TestKeyPrintsTheServersKeyAndItsHolder(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	var server int64
	if err := probe.QueryRow(ctx, "SELECT hashtextextended('booking:seat-42', 0)").Scan(&server); err != nil {
		t.Fatal(err)
	}
	n, _ := advisory.KeyOf("booking:seat-42").Int64()
	if n != server {
		t.Fatalf("KeyOf %d, server %d", n, server)
	}

	r := runCmd(t, db.DSN, "key", "booking:seat-42")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	if f := fields(lineWith(r.stdout, "key ")); len(f) < 2 || f[1] != strconv.FormatInt(server, 10) {
		t.Errorf("key line %q, want %d", lineWith(r.stdout, "key "), server)
	}
	halves := "halves   " + strconv.Itoa(int(int32(server>>32))) + ", " + strconv.Itoa(int(int32(server)))
	mustContain(t, r.stdout, halves, "SELECT pg_advisory_lock("+strconv.FormatInt(server, 10)+")",
		"hashtextextended('booking:seat-42', 0)", "not held now")

	for _, l := range strings.Split(r.stdout, "\n") {
		if utf8.RuneCountInString(l) > 100 {
			t.Errorf("line of %d columns: %q", utf8.RuneCountInString(l), l)
		}
	}

	holder := session(t, db, "booking-api")
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('booking:seat-42', 0))"); err != nil {
		t.Fatal(err)
	}
	waiter := session(t, db, "booking-worker")
	done := wait(t, probe, waiter, "SELECT pg_advisory_lock_shared($1)", n)
	r = runCmd(t, db.DSN, "key", "--dsn", db.DSN, "booking:seat-42")
	if l := lineWith(r.stdout, "held by pid "+itoa(pid(holder))); !strings.Contains(l, "booking-api") || !strings.Contains(l, "exclusive session") {
		t.Errorf("holder line %q", l)
	}
	if l := lineWith(r.stdout, "waited for by pid "+itoa(pid(waiter))); !strings.Contains(l, "shared") {
		t.Errorf("waiter line %q", l)
	}
	holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A quote in the name is doubled in the SQL shown.
	r = runCmd(t, "", "key", "it's")
	mustContain(t, r.stdout, "hashtextextended('it''s', 0)")
	if r.code != 0 || !strings.Contains(r.stderr, "holders not shown") {
		t.Errorf("offline: exit %d, %q", r.code, r.stderr)
	}
}
