package sqlxhelpers_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

// Seat is a fenced model: HolderToken receives the fencing token of the
// lock holder that wrote the row.
type Seat struct {
	ID          int64  `db:"id"`
	Holder      string `db:"holder"`
	Version     int64  `db:"version" lock:"version"`
	HolderToken int64  `db:"holder_token" lock:"fence"`
}

const seatsDDL = `CREATE TABLE seats (
	id           bigint PRIMARY KEY,
	holder       text   NOT NULL,
	version      bigint NOT NULL DEFAULT 1,
	holder_token bigint);
INSERT INTO seats (id, holder) VALUES (1, ''), (2, '');
` + accountsDDL

func loadSeat(t *testing.T, db *sqlx.DB, id int64) (s Seat, fence sql.NullInt64) {
	t.Helper()
	if err := db.QueryRow(`SELECT id, holder, version, holder_token FROM seats WHERE id = $1`, id).Scan(&s.ID, &s.Holder, &s.Version, &fence); err != nil {
		t.Fatal(err)
	}
	s.HolderToken = fence.Int64
	return s, fence
}

// The paused holder with real leases: the old holder's lease expires on
// the server, the new holder takes over with a larger token and writes;
// the old holder's struct writes are refused by the row and change
// nothing, in the database or in the struct.
func TestFencedStructWriteRefusedAfterLeaseTakeover(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.New(t)
	pg.Exec(seatsDDL)
	db := sqlx.NewDb(pg.SQL(), "pgx")
	h := newHelper(t, db)
	if err := lease.Migrate(ctx, pg.SQL()); err != nil {
		t.Fatal(err)
	}
	m := lease.New(pg.SQL())
	ttl := max(2*time.Second, 50*pg.Latency())
	old, err := m.TryAcquire(ctx, "seat-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release(ctx)
	oldSeat, _ := loadSeat(t, db, 1) // read under the old lease
	if _, err := db.Exec(`UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'seat-1'`); err != nil {
		t.Fatal(err)
	}
	new, err := m.TryAcquire(ctx, "seat-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer new.Release(ctx)

	s, _ := loadSeat(t, db, 1)
	s.Holder = "new"
	if err := h.Update(sqlock.WithFencingToken(ctx, new.Token()), "seats", &s); err != nil {
		t.Fatal(err)
	}
	if s.Version != 2 || s.HolderToken != new.Token() {
		t.Fatalf("after the new holder's write: %+v", s)
	}
	oldCtx := sqlock.WithFencingToken(ctx, old.Token())
	oldSeat.Holder = "old"
	want := oldSeat
	err = h.Update(oldCtx, "seats", &oldSeat)
	var fe *versioned.FencedError
	if !errors.As(err, &fe) || errors.Is(err, versioned.ErrStale) || fe.Token != old.Token() || fe.Current != new.Token() || fe.Table != "seats" {
		t.Fatalf("old holder's update: %v", err)
	}
	if oldSeat != want {
		t.Fatalf("refused update changed the struct: %+v", oldSeat)
	}
	// Re-read at the current version: still fenced out.
	cur, _ := loadSeat(t, db, 1)
	cur.Holder = "old"
	if err := h.Update(oldCtx, "seats", &cur); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder at the current version: %v", err)
	}
	if err := h.Delete(oldCtx, "seats", &cur); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder's delete: %v", err)
	}
	// Inside a transaction too (the probe runs on the transaction).
	tx := db.MustBegin()
	err = h.On(tx).Update(oldCtx, "seats", &cur)
	tx.Rollback()
	if !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder in a transaction: %v", err)
	}
	if got, f := loadSeat(t, db, 1); got.Holder != "new" || got.Version != 2 || f.Int64 != new.Token() {
		t.Fatalf("row: %+v %v", got, f)
	}
}

// A refused fenced write is fenced (a larger fence), stale (another
// version) or gone (no row), each its own error.
func TestFencedStructWriteToldApartFromStaleAndMissing(t *testing.T) {
	drivers(t, seatsDDL, func(t *testing.T, db *sqlx.DB) {
		ctx := sqlock.WithFencingToken(context.Background(), 5)
		h := newHelper(t, db)
		db.MustExec(`UPDATE seats SET version = 3, holder_token = 9 WHERE id = 1`)
		db.MustExec(`UPDATE seats SET version = 3, holder_token = 4 WHERE id = 2`)

		var fe *versioned.FencedError
		var se *versioned.StaleError
		for _, op := range []string{"update", "delete"} {
			write := h.Update
			if op == "delete" {
				write = func(ctx context.Context, table string, ptr any, _ ...sqlxhelpers.WriteOption) error {
					return h.Delete(ctx, table, ptr)
				}
			}
			if err := write(ctx, "seats", &Seat{ID: 1, Version: 3}); !errors.As(err, &fe) || fe.Current != 9 || fe.Op != op {
				t.Errorf("%s fenced: %v", op, err)
			}
			if err := write(ctx, "seats", &Seat{ID: 2, Version: 2}); !errors.As(err, &se) || !se.Probed || se.Gone || se.Current != 3 || errors.Is(err, versioned.ErrFenced) {
				t.Errorf("%s stale: %v", op, err)
			}
			if err := write(ctx, "seats", &Seat{ID: 3, Version: 1}); !errors.As(err, &se) || !se.Gone || errors.Is(err, versioned.ErrFenced) {
				t.Errorf("%s missing: %v", op, err)
			}
		}
		// A NULL fence counts as 0, an equal token passes, and the write
		// sets the token.
		db.MustExec(`UPDATE seats SET holder_token = NULL WHERE id = 2`)
		s := Seat{ID: 2, Holder: "ann", Version: 3}
		if err := h.Update(ctx, "seats", &s); err != nil || s.HolderToken != 5 {
			t.Fatalf("NULL fence: %v %+v", err, s)
		}
		if err := h.Update(ctx, "seats", &s); err != nil || s.Version != 5 {
			t.Fatalf("equal token: %v %+v", err, s)
		}
		if got, f := loadSeat(t, db, 2); got != s || !f.Valid {
			t.Fatalf("row %+v, struct %+v", got, s)
		}
	})
}

// A fenced model written without a usable token is refused before
// anything is sent, and so is an attempt to assign the fence column.
func TestFencedStructWriteNeedsATokenAndSendsNothing(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(seatsDDL)
	db := sqlx.NewDb(pg.SQL(), "pgx")
	c := &countingExec{db: db}
	h := newHelper(t, db).On(c)
	ctx := context.Background()
	s := Seat{ID: 1, Holder: "x", Version: 1}
	for name, err := range map[string]error{
		"update without a token":  h.Update(ctx, "seats", &s),
		"delete without a token":  h.Delete(ctx, "seats", &s),
		"zero token":              h.Update(sqlock.WithFencingToken(ctx, 0), "seats", &s),
		"negative token":          h.Delete(sqlock.WithFencingToken(ctx, -1), "seats", &s),
		"fence column in Columns": h.Update(sqlock.WithFencingToken(ctx, 1), "seats", &s, sqlxhelpers.Columns("holder", "holder_token")),
	} {
		if !errors.Is(err, versioned.ErrInvalidArg) {
			t.Errorf("%s: %v, want ErrInvalidArg", name, err)
		}
	}
	if n := c.n.Load(); n != 0 || s != (Seat{ID: 1, Holder: "x", Version: 1}) {
		t.Fatalf("refused writes sent %d statements, struct %+v", n, s)
	}
	// An unfenced model ignores the context's token.
	db.MustExec(`INSERT INTO accounts (id, owner, balance) VALUES (1, 'a', 0)`)
	a := Account{ID: 1, Owner: "b"}
	if err := h.Update(sqlock.WithFencingToken(ctx, 3), "accounts", &a); err != nil || a.Version != 1 {
		t.Fatalf("unfenced model: %v %+v", err, a)
	}
}

// A fenced struct write costs the round trips of an unfenced one (one),
// counted on the wire; a refusal adds one query, to say why.
func TestFencedStructWriteCostsNoExtraRoundTrip(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(seatsDDL)
	pg.Exec(`INSERT INTO accounts (id, owner, balance) VALUES (1, 'a', 0)`)
	cfg, err := pgx.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return countingConn{c, &writes}, err
	}
	sdb := stdlib.OpenDB(*cfg)
	sdb.SetMaxOpenConns(1)
	defer sdb.Close()
	db := sqlx.NewDb(sdb, "pgx")
	h := newHelper(t, db)
	ctx := sqlock.WithFencingToken(context.Background(), 5)
	count := func(f func() error) int64 {
		t.Helper()
		before := writes.Load()
		if err := f(); err != nil && !errors.Is(err, versioned.ErrFenced) {
			t.Fatal(err)
		}
		return writes.Load() - before
	}
	a := Account{ID: 1, Owner: "a"}
	s := Seat{ID: 1, Holder: "a", Version: 1}
	plain := func() error { return h.Update(ctx, "accounts", &a) }
	fenced := func() error { return h.Update(ctx, "seats", &s) }
	refused := func() error {
		c := s
		return h.Update(sqlock.WithFencingToken(ctx, 4), "seats", &c)
	}
	for _, f := range []func() error{plain, fenced, refused} {
		count(f) // warm the statement cache
	}
	p, f, r := count(plain), count(fenced), count(refused)
	if f != p || r != p+1 {
		t.Fatalf("round trips: unfenced %d, fenced %d (want %d), refused %d (want %d)", p, f, p, r, p+1)
	}
	t.Logf("round trips: unfenced %d, fenced %d, refused %d", p, f, r)
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}
