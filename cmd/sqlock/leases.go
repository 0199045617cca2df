package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sqlock/sqlock/inspect"
)

func leasesCmd(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print as JSON")
	table := fs.String("table", "sqlock_leases", "the lease table ([schema.]name)")
	rest, err := flags(fs, args)
	switch {
	case err != nil:
		return err
	case len(rest) > 0:
		return usageError{"leases takes no arguments"}
	}
	opt := inspect.WithLeaseTable(*table)
	db, err := open(ctx, *dsn, e)
	if err != nil {
		return err
	}
	defer db.Close()
	snap, err := inspect.Take(ctx, db, opt) // validates --table first
	if err != nil {
		return err
	}
	if !snap.LeaseTable {
		return fmt.Errorf("no lease table %q in this database (package lease's Migrate creates it)", *table)
	}
	if *asJSON {
		snap.Locks = nil
		return writeJSON(e.stdout, snap)
	}
	writeLeaseRows(e.stdout, snap)
	return nil
}

// writeLeaseRows prints the leases as a table: who holds each is its
// holder label (lease.WithHolder), or its random owner id if it has none.
func writeLeaseRows(w io.Writer, s *inspect.Snapshot) {
	fmt.Fprintf(w, "leases: %d\n", len(s.Leases))
	if len(s.Leases) == 0 {
		return
	}
	fmt.Fprintf(w, "\n %-30s %10s %8s %9s  %s\n", "NAME", "TOKEN", "HELD", "EXPIRES", "HOLDER")
	for _, l := range s.Leases {
		exp := "in " + dur(l.ExpiresIn, false)
		if l.ExpiresIn <= 0 {
			exp = "expired"
		}
		holder := l.Holder
		if holder == "" {
			holder = l.Owner
		}
		if len(l.Payload) > 0 {
			holder += fmt.Sprintf(" (+%d B)", len(l.Payload))
		}
		fmt.Fprintf(w, " %-30s %10d %8s %9s  %s\n", fit(l.Name, 30), l.Token, dur(l.Held, false), exp, fit(holder, 36))
	}
}

// jsonLease is a lease in --json output; the payload is base64 (encoding/json's
// []byte), absent if none.
type jsonLease struct {
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	Holder    string    `json:"holder"`
	Payload   []byte    `json:"payload,omitempty"`
	Token     int64     `json:"token"`
	Acquired  time.Time `json:"acquired_at"`
	Expires   time.Time `json:"expires_at"`
	ExpiresIn float64   `json:"expires_in_seconds"`
}

func leaseJSON(l inspect.Lease) jsonLease {
	return jsonLease{l.Name, l.Owner, l.Holder, l.Payload, l.Token, l.Acquired, l.Expires, l.ExpiresIn.Seconds()}
}
