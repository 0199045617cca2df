package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/lease"
)

// unreachable is a handle to a server that does not exist: anything sent
// through it fails with a connection error, never with the errors the
// checks return, and its pool stays empty.
func unreachable(t *testing.T) *sql.DB {
	return openSQL(t, "pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
}

func TestBadInputIsRefusedBeforeAnythingIsSent(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := unreachable(t)
	m := lease.New(db)
	cases := []struct {
		name string
		ttl  time.Duration
	}{
		{"", time.Second},
		{strings.Repeat("x", 256), time.Second},
		{"bad\xff", time.Second},
		{"nul\x00", time.Second},
		{"ok", 0},
		{"ok", -time.Second},
		{"ok", lease.MinTTL - 1},
	}
	for _, c := range cases {
		for _, try := range []func(context.Context, string, time.Duration) (*lease.Lease, error){m.Acquire, m.TryAcquire} {
			l, err := try(ctx, c.name, c.ttl)
			if l != nil || !errors.Is(err, lease.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Errorf("name %q ttl %v: %v, want ErrInvalid and sqlock.ErrInvalidArgument", c.name, c.ttl, err)
			}
		}
	}
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections opened: something was sent", n)
	}
	// The longest name is accepted (and so goes to the server, which is
	// not there).
	if _, err := m.TryAcquire(ctx, strings.Repeat("x", 255), time.Second); errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("a 255-byte name was refused: %v", err)
	}
}

// TestBadInputMatchesInvalidArgumentOnARealServer: on a live server, through
// the Manager and through sqlock.Acquirer, every bad name and TTL is
// lease.ErrInvalid and sqlock.ErrInvalidArgument, no lease is returned, and
// nothing reached the table: no row, no token drawn.
func TestBadInputMatchesInvalidArgumentOnARealServer(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		m := bc.open(t, db.DSN)
		invalid := func(what string, l sqlock.Lock, err error) {
			t.Helper()
			if l != nil || !errors.Is(err, lease.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Errorf("%s: %v, %v; want nil, ErrInvalid and sqlock.ErrInvalidArgument", what, l, err)
			}
		}
		for _, name := range []string{"", strings.Repeat("x", 256), "bad\xff", "nul\x00"} {
			l, err := m.TryAcquire(ctx, name, roomyTTL)
			invalid("TryAcquire "+strconv.Quote(name), asLock(l), err)
			l, err = m.Acquire(ctx, name, roomyTTL)
			invalid("Acquire "+strconv.Quote(name), asLock(l), err)
			a := m.Acquirer(roomyTTL)
			lk, err := a.TryAcquire(ctx, name)
			invalid("Acquirer().TryAcquire "+strconv.Quote(name), lk, err)
			lk, err = a.Acquire(ctx, name)
			invalid("Acquirer().Acquire "+strconv.Quote(name), lk, err)
		}
		for _, ttl := range []time.Duration{0, -time.Second, lease.MinTTL - 1} {
			a := m.Acquirer(ttl)
			lk, err := a.TryAcquire(ctx, "ok")
			invalid(fmt.Sprintf("Acquirer(%v).TryAcquire", ttl), lk, err)
			lk, err = a.Acquire(ctx, "ok")
			invalid(fmt.Sprintf("Acquirer(%v).Acquire", ttl), lk, err)
		}
	})
	var rows int
	var drawn bool
	conn := admin(t, db)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sqlock_leases`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT is_called FROM sqlock_leases_token_seq`).Scan(&drawn); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || drawn {
		t.Fatalf("bad input reached the table: %d rows, a token drawn: %v", rows, drawn)
	}
}

// asLock is l as a sqlock.Lock, nil for a nil *Lease.
func asLock(l *lease.Lease) sqlock.Lock {
	if l == nil {
		return nil
	}
	return l
}

func TestNilHandlesAndBadOptionsAreTypedErrors(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	for _, m := range []*lease.Manager{lease.New((*sql.DB)(nil)), lease.New((*pgxpool.Pool)(nil))} {
		if _, err := m.Acquire(ctx, "x", time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
			t.Errorf("Acquire on a nil handle: %v, want ErrNilHandle", err)
		}
	}
	if err := lease.Migrate(ctx, (*sql.DB)(nil)); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("Migrate on a nil handle: %v, want ErrNilHandle", err)
	}
	var nilManager *lease.Manager
	if _, err := nilManager.TryAcquire(ctx, "x", time.Second); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil Manager: %v, want ErrNilHandle", err)
	}
	db := unreachable(t)
	for _, o := range []lease.Option{
		lease.WithTimeout(0), lease.WithTimeout(-time.Second), lease.WithPolling(0), lease.WithMaxHold(-1),
		lease.WithTable(""), lease.WithTable("a;b"), lease.WithTable(`x"y`), lease.WithTable("s.t.u"),
		lease.WithTable(strings.Repeat("t", 54)),
	} {
		m := lease.New(db, o)
		if _, err := m.Acquire(ctx, "x", time.Second); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("Acquire with a bad option: %v, want ErrInvalidOption", err)
		}
		if _, err := lease.DDL(o); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("DDL with a bad option: %v, want ErrInvalidOption", err)
		}
	}
	var nilLease *lease.Lease
	if err := nilLease.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release of a nil lease: %v, want ErrNotHeld", err)
	}
	if err := nilLease.Guard(ctx, nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("Guard of a nil lease: %v, want ErrNilHandle", err)
	}
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections opened: something was sent", n)
	}
}

func TestUseAfterReleaseIsRefusedWithoutASend(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	db := newDB(t)
	h := openSQL(t, "pgx", db.DSN)
	m := lease.New(h)
	l := must[*lease.Lease](t)(m.Acquire(ctx, "once", roomyTTL))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	tx := must[*sql.Tx](t)(h.BeginTx(ctx, nil))
	defer tx.Rollback()
	if err := l.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release after Release: %v, want ErrNotHeld", err)
	}
	if err := l.Guard(ctx, tx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Guard after Release: %v, want ErrNotHeld", err)
	}
	// The transaction saw no statement: it is still usable.
	var one int
	if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if err := l.Guard(ctx, h); !errors.Is(err, sqlock.ErrUnsupported) {
		t.Fatalf("Guard on a *sql.DB: %v, want ErrUnsupported", err)
	}
	if err := l.Guard(ctx, nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Fatalf("Guard on nil: %v, want ErrNilHandle", err)
	}
}
