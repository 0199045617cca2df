package matrix

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"

	"fmt"
	"strconv"
	"strings"

	"github.com/sqlock/sqlock/internal/vmodel"
)

// ErrFenced is what [State.Apply] returns when its fenced write is refused
// because a holder with a larger token has written: versioned.ErrFenced.
var ErrFenced = vmodel.ErrFenced

// Querier is what State's statements run on: *sql.DB, *sql.Conn, *sql.Tx
// (txlock.Querier has this shape too).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// State is one workload's tables, in a schema of their own made for one
// cell, with no unique constraint beyond the items' primary key, so that a
// mechanism that lets two contenders through shows as anomalies:
//
//	Items:  key text PRIMARY KEY, qty bigint, version bigint (1 at first), fence bigint (0 at first)
//	Events: id bigserial PRIMARY KEY, key text, fence bigint — one row per charge, booking or decrement
//
// An item's qty is what is left: 1 for an unpaid order or a free seat, 0
// once charged or booked; the stock for a product.
type State struct {
	Workload Workload
	// Schema is the schema's name, a lower-case identifier that needs no
	// quoting (mx_<workload>_<random hex>); Items and Events the qualified
	// table names (Schema.items, Schema.events), for a row that writes its
	// own SQL (versioned's table, a hand-written UPDATE … WHERE version =
	// $n) or keeps its own names apart per cell (lease names, idem scopes).
	Schema, Items, Events string

	db    *sql.DB
	keys  int
	stock int64
}

// Item is one row of State.Items.
type Item struct {
	Key                 string
	Qty, Version, Fence int64
}

// Next is what an operation on it writes: the quantity left after it, and
// false when the operation must be refused (already charged or booked,
// sold out).
func (it Item) Next() (qty int64, ok bool) {
	if it.Qty <= 0 {
		return it.Qty, false
	}
	return it.Qty - 1, true
}

// StateOption configures NewState.
type StateOption func(*State)

// WithStock sets each stock item's initial quantity (default 1000); other
// workloads ignore it.
func WithStock(n int64) StateOption { return func(s *State) { s.stock = n } }

// NewState creates w's tables with keys items, Key(0) … Key(keys-1), in a
// fresh schema on db. Drop removes them.
func NewState(ctx context.Context, db *sql.DB, w Workload, keys int, opts ...StateOption) (*State, error) {
	switch w {
	case Payment, Seat, Stock:
	default:
		return nil, fmt.Errorf("matrix: unknown workload %q", w)
	}
	if keys < 1 {
		return nil, fmt.Errorf("matrix: %d keys", keys)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	name := "mx_" + string(w) + "_" + hex.EncodeToString(b[:])
	s := &State{Workload: w, Schema: name, db: db, keys: keys, stock: 1000}
	for _, o := range opts {
		o(s)
	}
	if s.stock < 0 {
		return nil, fmt.Errorf("matrix: stock %d", s.stock)
	}
	s.Items, s.Events = s.Schema+".items", s.Schema+".events"
	_, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.items (key text PRIMARY KEY, qty bigint NOT NULL,
			version bigint NOT NULL DEFAULT 1, fence bigint NOT NULL DEFAULT 0);
		CREATE TABLE %[1]s.events (id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO %[1]s.items (key, qty) SELECT 'k' || g, %[2]d FROM generate_series(0, %[3]d) g`,
		s.Schema, s.initialQty(), keys-1))
	if err != nil {
		return nil, fmt.Errorf("matrix: create %s state: %w", w, err)
	}
	return s, nil
}

func (s *State) initialQty() int64 {
	if s.Workload == Stock {
		return s.stock
	}
	return 1
}

// Keys is the number of items.
func (s *State) Keys() int { return s.keys }

// Key is the i-th item's key ("k0", "k1", …).
func (s *State) Key(i int) string { return "k" + strconv.Itoa(i) }

// Read reads key's item on q.
func (s *State) Read(ctx context.Context, q Querier, key string) (Item, error) {
	it := Item{Key: key}
	err := q.QueryRowContext(ctx, "SELECT qty, version, fence FROM "+s.Items+" WHERE key = $1", key).
		Scan(&it.Qty, &it.Version, &it.Fence)
	return it, err
}

// Record inserts the event of an operation applied to key (the charge,
// the booking, the decrement), with the fence it was written under.
func (s *State) Record(ctx context.Context, q Querier, key string, fence int64) error {
	_, err := q.ExecContext(ctx, "INSERT INTO "+s.Events+" (key, fence) VALUES ($1, $2)", key, fence)
	return err
}

// Apply is one operation on key written as the naive handler writes it:
// read, check, write, record — three statements, no guard of its own, the
// body a lock guards. fence > 0 makes the write conditional on the item's
// fence being at most fence (and sets it): a holder whose token is older
// than the last writer's is refused with ErrFenced and writes nothing.
// fence == 0 writes unconditionally.
func (s *State) Apply(ctx context.Context, q Querier, key string, fence int64) (Result, error) {
	it, err := s.Read(ctx, q, key)
	if err != nil {
		return 0, err
	}
	qty, ok := it.Next()
	if !ok {
		return Refused, nil
	}
	res, err := q.ExecContext(ctx, "UPDATE "+s.Items+
		" SET qty = $2, version = version + 1, fence = greatest(fence, $3) WHERE key = $1 AND ($3 = 0 OR fence <= $3)",
		key, qty, fence)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n == 0 {
		return 0, fmt.Errorf("matrix: %s fenced at token %d: %w", key, fence, ErrFenced)
	}
	if err := s.Record(ctx, q, key, fence); err != nil {
		return 0, err
	}
	return Done, nil
}

// Check counts the workload's invariant violations and prints one: for
// payment and seat each event beyond a key's first (a double charge, a
// double booking); for stock each key whose quantity is negative, plus each
// decrement recorded that the quantity does not show (or the reverse).
func (s *State) Check(ctx context.Context) (anomalies int, example string, err error) {
	var q string
	if s.Workload == Stock {
		q = fmt.Sprintf(`SELECT i.key, i.qty, coalesce(e.n, 0), coalesce(e.fences, '')
			FROM %s i LEFT JOIN (SELECT key, count(*) n, string_agg(fence::text, ',' ORDER BY id) fences
				FROM %s GROUP BY key) e ON e.key = i.key
			WHERE i.qty < 0 OR %d - i.qty <> coalesce(e.n, 0) ORDER BY i.key`, s.Items, s.Events, s.stock)
	} else {
		q = fmt.Sprintf(`SELECT key, 0, count(*), string_agg(fence::text, ',' ORDER BY id)
			FROM %s GROUP BY key HAVING count(*) > 1 ORDER BY key`, s.Events)
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return 0, "", fmt.Errorf("matrix: check %s: %w", s.Workload, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, fences string
		var qty, n int64
		if err := rows.Scan(&key, &qty, &n, &fences); err != nil {
			return 0, "", err
		}
		var k int
		var ex string
		switch s.Workload {
		case Stock:
			lost := s.stock - qty
			k = int(abs(lost - n))
			if qty < 0 {
				k++
			}
			ex = fmt.Sprintf("product %s: stock %d → %d, but %d decrements recorded (fences %s)", key, s.stock, qty, n, orNone(fences))
			if qty < 0 {
				ex = fmt.Sprintf("product %s: stock %d → %d (negative), %d decrements recorded", key, s.stock, qty, n)
			}
		case Payment:
			k = int(n - 1)
			ex = fmt.Sprintf("order %s charged %d times (fences %s)", key, n, fences)
		case Seat:
			k = int(n - 1)
			ex = fmt.Sprintf("seat %s booked %d times (fences %s)", key, n, fences)
		}
		if example == "" {
			example = ex
		}
		anomalies += k
	}
	return anomalies, example, rows.Err()
}

// Applied returns the number of events recorded: operations applied.
func (s *State) Applied(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.Events).Scan(&n)
	return n, err
}

// Drop removes the state's schema.
func (s *State) Drop(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, "DROP SCHEMA "+s.Schema+" CASCADE")
	return err
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "none"
	}
	return s
}
