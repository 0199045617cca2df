package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// `sqlock leases` names each lease's holder by its label (lease.WithHolder),
// with its payload's size, or by its owner id when it has no label, within
// 100 columns; --json carries the label, the owner and the payload.
func TestLeasesCommandShowsHolderLabelsAndPayloads(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	labelled, err := lease.New(db.SQL(), lease.WithHolder("billing-7 pid 4121"), lease.WithPayload([]byte("job=42"))).
		Acquire(ctx, "invoices", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer labelled.Release(ctx)
	plain, err := lease.New(db.SQL()).Acquire(ctx, "plain", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)

	r := runCmd(t, db.DSN, "leases")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if lineWith(r.stdout, "HOLDER") == "" || lineWith(r.stdout, "invoices", "billing-7 pid 4121 (+6 B)") == "" {
		t.Fatalf("no holder label for invoices:\n%s", r.stdout)
	}
	var owner string
	if err := db.SQL().QueryRowContext(ctx, `SELECT owner::text FROM sqlock_leases WHERE name = 'plain'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if lineWith(r.stdout, "plain", owner) == "" {
		t.Fatalf("no owner id for the unlabelled lease:\n%s", r.stdout)
	}
	fits(t, r.stdout)

	r = runCmd(t, db.DSN, "leases", "--json")
	var got struct {
		Leases []struct {
			Name    string `json:"name"`
			Owner   string `json:"owner"`
			Holder  string `json:"holder"`
			Payload []byte `json:"payload"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v", r.code, err)
	}
	if len(got.Leases) != 2 || got.Leases[0].Holder != "billing-7 pid 4121" || string(got.Leases[0].Payload) != "job=42" ||
		got.Leases[1].Holder != "" || got.Leases[1].Payload != nil || got.Leases[1].Owner != owner {
		t.Fatalf("JSON leases %+v", got.Leases)
	}
}
