package lease

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestTTLShorterThanEightMeasuredRoundTripsIsRefused(t *testing.T) {
	m := &Manager{}
	if err := m.check("x", MinTTL); err != nil {
		t.Fatalf("MinTTL before any round trip was measured: %v", err)
	}
	// The first round trips of a new pool include dialing: until a few
	// were measured, one slow one refuses nothing.
	m.observeRTT(300 * time.Millisecond)
	if err := m.ttlTooShort(time.Second); err != nil {
		t.Fatalf("a 1 s TTL after one slow round trip (a dial): %v", err)
	}
	for range rttSamples - 1 {
		m.observeRTT(10 * time.Millisecond)
	}
	if err := m.ttlTooShort(79 * time.Millisecond); err == nil {
		t.Fatal("a TTL of under 8 measured round trips was accepted")
	}
	if err := m.ttlTooShort(80 * time.Millisecond); err != nil {
		t.Fatalf("a TTL of 8 round trips: %v", err)
	}
}

// TestTTLRefusalIsMeasuredAgain: a Manager whose first round trips all
// came in a load spike (four of 200 ms) measures once more before refusing
// a TTL by them, so a 1 s lease is granted once the machine is fast again;
// through a network whose round trip is at least 20 ms, a 100 ms TTL is
// still refused (ErrTTLTooShort), after that one measurement, and nothing is
// written.
func TestTTLRefusalIsMeasuredAgain(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	if err := Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	m := New(db.SQL())
	for range rttSamples {
		m.observeRTT(200 * time.Millisecond)
	}
	l, err := m.acquire(ctx, "acquire", "spike", time.Second, false)
	if err != nil {
		t.Fatalf("a 1 s TTL after a spike of 200 ms round trips: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	p := pgtest.StartProxy(t, db.DSN)
	if err := p.SetDelay(pgtest.BothWays, 10*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	sdb, err := sql.Open("pgx", p.DSN) // the driver main_test.go registers
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	slow := New(sdb)
	for range rttSamples {
		slow.observeRTT(time.Hour) // only the measurement decides
	}
	if _, err := slow.acquire(ctx, "acquire", "far", 100*time.Millisecond, false); !errors.Is(err, ErrTTLTooShort) {
		t.Fatalf("a 100 ms TTL over a ≥ 20 ms round trip: %v, want ErrTTLTooShort", err)
	}
	var n int
	if err := db.SQL().QueryRow(`SELECT count(*) FROM sqlock_leases WHERE name = 'far'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused, but %d rows written (%v)", n, err)
	}
}
