package lease_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// TestHolderAndPayloadAreStoredWithTheLease: a Manager's WithHolder label
// and WithPayload bytes are in the lease's row, read back by the Lease, on
// every driver; a takeover by a Manager without them clears them; a later
// change to the caller's slice changes nothing stored.
func TestHolderAndPayloadAreStoredWithTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bc backendCase) {
		db := newDB(t)
		conn := admin(t, db)
		ctx := t.Context()
		payload := []byte("job=42\x00\xff")
		m := bc.open(t, db.DSN, lease.WithHolder("host-a pid 7"), lease.WithPayload(payload))
		payload[0] = 'X'
		l, err := m.Acquire(ctx, "labelled", roomyTTL)
		if err != nil {
			t.Fatal(err)
		}
		var holder string
		var stored []byte
		if err := conn.QueryRow(ctx, `SELECT holder, payload FROM sqlock_leases WHERE name = 'labelled'`).Scan(&holder, &stored); err != nil {
			t.Fatal(err)
		}
		if holder != "host-a pid 7" || !bytes.Equal(stored, []byte("job=42\x00\xff")) {
			t.Fatalf("row: holder %q payload %q", holder, stored)
		}
		if l.Holder() != holder || !bytes.Equal(l.Payload(), stored) {
			t.Fatalf("Lease: holder %q payload %q", l.Holder(), l.Payload())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		plain, err := bc.open(t, db.DSN).Acquire(ctx, "labelled", roomyTTL)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Release(ctx)
		stored = []byte("not read")
		if err := conn.QueryRow(ctx, `SELECT holder, payload FROM sqlock_leases WHERE name = 'labelled'`).Scan(&holder, &stored); err != nil {
			t.Fatal(err)
		}
		if holder != "" || stored != nil || plain.Holder() != "" || plain.Payload() != nil {
			t.Fatalf("after a takeover without them: row %q %q, Lease %q %q", holder, stored, plain.Holder(), plain.Payload())
		}
	})
}

// TestOversizedHolderOrPayloadIsRefusedBeforeAnythingIsSent: a label over
// MaxHolderLen bytes or not UTF-8, or a payload over MaxPayloadLen, makes
// every acquisition fail with ErrInvalid and sqlock.ErrInvalidArgument;
// nothing is written. The bounds themselves are accepted.
func TestOversizedHolderOrPayloadIsRefusedBeforeAnythingIsSent(t *testing.T) {
	db := newDB(t)
	conn := admin(t, db)
	ctx := t.Context()
	for _, opt := range []lease.Option{
		lease.WithHolder(strings.Repeat("h", lease.MaxHolderLen+1)),
		lease.WithHolder("bad\xff"),
		lease.WithHolder("nul\x00"),
		lease.WithPayload(make([]byte, lease.MaxPayloadLen+1)),
	} {
		m := lease.New(db.Pool(), opt)
		for _, acquire := range []func() error{
			func() error { _, err := m.Acquire(ctx, "bounded", roomyTTL); return err },
			func() error { _, err := m.TryAcquire(ctx, "bounded", roomyTTL); return err },
			func() error { _, err := m.AcquireAll(ctx, []string{"bounded", "other"}, roomyTTL); return err },
		} {
			err := acquire()
			if !errors.Is(err, lease.ErrInvalid) || !errors.Is(err, sqlock.ErrInvalidArgument) {
				t.Fatalf("%v, want ErrInvalid and sqlock.ErrInvalidArgument", err)
			}
		}
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sqlock_leases`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows written (%v)", rows, err)
	}
	m := lease.New(db.Pool(), lease.WithHolder(strings.Repeat("é", lease.MaxHolderLen/2)),
		lease.WithPayload(make([]byte, lease.MaxPayloadLen)))
	l, err := m.Acquire(ctx, "bounded", roomyTTL)
	if err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	l.Release(ctx)
}

// oldDDL is the table as versions before the queue and the holder columns
// made it.
const oldDDL = `CREATE SEQUENCE sqlock_leases_token_seq AS bigint NO CYCLE;
CREATE TABLE sqlock_leases (
    name        text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 255),
    owner       uuid        NOT NULL,
    token       bigint      NOT NULL UNIQUE,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
)`

// TestATableOfAnOlderVersionIsRefusedTypedUntilMigrated: on a table made by
// an older version, acquisitions fail with ErrSchema (and
// sqlock.ErrUnsupported), naming Migrate, and change nothing; Migrate
// upgrades it in place, keeping its rows and its tokens' order, and then
// acquisitions work.
func TestATableOfAnOlderVersionIsRefusedTypedUntilMigrated(t *testing.T) {
	db := pgtest.New(t)
	conn := admin(t, db)
	ctx := t.Context()
	if _, err := conn.Exec(ctx, oldDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO sqlock_leases VALUES ('old', gen_random_uuid(), nextval('sqlock_leases_token_seq'),
		now(), now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db.Pool())
	for _, acquire := range []func() error{
		func() error { _, err := m.Acquire(ctx, "new", roomyTTL); return err },
		func() error { _, err := m.TryAcquire(ctx, "new", roomyTTL); return err },
		func() error { _, err := m.AcquireAll(ctx, []string{"new", "old"}, roomyTTL); return err },
	} {
		err := acquire()
		if !errors.Is(err, lease.ErrSchema) || !errors.Is(err, sqlock.ErrUnsupported) || !strings.Contains(err.Error(), "lease.Migrate") {
			t.Fatalf("on an old table: %v, want ErrSchema naming lease.Migrate", err)
		}
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sqlock_leases`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows (%v)", rows, err)
	}
	if err := lease.Migrate(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx, "old", roomyTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 2 {
		t.Fatalf("token %d after the old row's 1", l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
