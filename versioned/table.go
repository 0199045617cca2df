package versioned

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/internal/vguard"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/observe"
)

// DB runs statements: *sql.DB, *sql.Tx and *sql.Conn satisfy it, and so do
// sqlx's handles, which embed them. Update and Delete only execute;
// QueryRowContext serves CompareAndSwap and the stale probe (WithProbe).
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Pair is a column and a value: an assignment (Set), a key part or a
// compared value (Eq). The column is always quoted; the value always
// travels as a bind parameter.
type Pair struct {
	Column string
	Value  any
}

// Set is the assignment column = value.
func Set(column string, value any) Pair { return Pair{Column: column, Value: value} }

// Eq is the condition column = value (column IS NULL when value is nil, a
// nil pointer or a driver.Valuer that yields NULL).
func Eq(column string, value any) Pair { return Pair{Column: column, Value: value} }

// Fence makes a versioned write a fenced one: besides the version, the
// row's fence column must be at most token (a NULL fence counts as 0), and
// the write sets it to token:
//
//	UPDATE t SET …, version = version + 1, fence = $tok WHERE key = $k AND version = $v AND COALESCE(fence, 0) <= $tok
//
// token is the fencing token of the lock the writer holds
// ((*lease.Lease).Token, [sqlock.Fenced]); it must be positive. A holder
// that lost its lock without noticing is then refused by the database once
// a newer holder (a larger token) has written the row: the write changes
// nothing and returns a *[FencedError] ([ErrFenced]). The same holder
// writing again (an equal token) is allowed. Pass it among [Update]'s
// assignments or to [Delete]; struct writes take the token from the
// context instead (see [UpdateStruct]).
func Fence(column string, token int64) Pair { return Pair{Column: column, Value: fenceToken(token)} }

// fenceToken is the Value of a Pair made by Fence: no other Pair has it.
type fenceToken int64

// fence is a write's fence: its column and token (on is false for an
// unfenced write).
type fence struct {
	column string
	token  int64
	on     bool
}

// splitFence takes the Fence pair out of pairs. Without one (the common
// case) it returns pairs itself and allocates nothing.
func splitFence(op string, pairs []Pair) ([]Pair, fence, error) {
	var f fence
	n := 0
	for _, p := range pairs {
		tok, ok := p.Value.(fenceToken)
		if !ok {
			continue
		}
		if f.on {
			return nil, f, inputErr(op, "fence", "two Fence guards in one write", ErrInvalidArg)
		}
		f = fence{column: p.Column, token: int64(tok), on: true}
		n++
	}
	if !f.on {
		return pairs, f, nil
	}
	set := make([]Pair, 0, len(pairs)-n)
	for _, p := range pairs {
		if _, ok := p.Value.(fenceToken); !ok {
			set = append(set, p)
		}
	}
	return set, f, nil
}

// check refuses a fence the table cannot honour, before anything is sent.
func (f fence) check(op string, t *Table, set []Pair) error {
	if !f.on {
		return nil
	}
	if f.token <= 0 {
		return inputErr(op, "fence", fmt.Sprintf("token %d: a fencing token is positive", f.token), ErrInvalidArg)
	}
	if err := checkIdent(op, "fence column", f.column); err != nil {
		return err
	}
	if f.column == t.cfg.version || containsString(t.cfg.keys, f.column) {
		return inputErr(op, "fence column", fmt.Sprintf("%q is the version or a key column", f.column), ErrInvalidArg)
	}
	for _, p := range set {
		if p.Column == f.column {
			return inputErr(op, "set column", fmt.Sprintf("%q is the fence column, which the fenced write sets to the token", p.Column), ErrInvalidArg)
		}
	}
	return nil
}

// CompositeKey is the key value of a table with several key columns, in the
// order of WithKey.
type CompositeKey []any

// Option configures a Table.
type Option func(*config)

type config struct {
	dialect  Dialect
	keys     []string
	version  string
	probe    bool
	zeroKey  bool
	observer observe.Observer
}

// WithDialect sets the SQL dialect (default Postgres).
func WithDialect(d Dialect) Option { return func(c *config) { c.dialect = d } }

// WithKey names the key columns that identify one row (default "id"). They
// must be unique together: a write that affects several rows is reported
// as *RowsError.
func WithKey(columns ...string) Option {
	return func(c *config) { c.keys = append([]string(nil), columns...) }
}

// WithVersionColumn names the version column (default "version"). The
// column must be NOT NULL: NULL = $n is never true, so a NULL version can
// never be written through this package.
func WithVersionColumn(column string) Option { return func(c *config) { c.version = column } }

// WithProbe makes a stale write run one more query, SELECT of the version
// by key, to tell a row that is gone from one that changed (and fill in its
// current version). It costs nothing unless a write goes stale. The probe
// sees the database a moment after the conflict: a hint for messages and
// decisions, not a guarantee.
func WithProbe() Option { return func(c *config) { c.probe = true } }

// WithZeroKey accepts zero key values (0, "") as real keys. By default a
// zero key is treated as missing (ErrNoKey), as an ORM treats an unsaved
// struct; nil, nil pointers and NULL driver.Valuers are always missing.
func WithZeroKey() Option { return func(c *config) { c.zeroKey = true } }

// WithObserver reports each stale write (observe.Stale, Source
// "versioned", System the dialect's database as OpenTelemetry's
// db.system.name spells it: "postgresql", "mysql" — MariaDB included —
// or "sqlite") to o. The default does nothing. Several WithObserver options add up ([observe.Multi]); a nil o adds
// nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *config) { c.observer = observe.Multi(c.observer, o) }
}

// Table is a versioned table: its name, key columns, version column and
// dialect, with the fixed statements built and quoted once. Build it once
// with NewTable and share it; it is immutable and safe for concurrent use.
type Table struct {
	name      string
	cfg       config
	qTable    string
	qKeys     []string
	qVersion  string
	deleteSQL string
	probeSQL  string
	existsSQL string
	cte       string // quoted name of the compare-and-swap CTE

	// updates caches built UPDATE statements by their assignment columns
	// (copy on write, at most maxCachedUpdates), so that a steady workload
	// builds each statement once.
	updates atomic.Pointer[[]cachedUpdate]
}

type cachedUpdate struct {
	del   bool   // a fenced DELETE (the unfenced one is deleteSQL)
	fence string // the fence column, "" for an unfenced write
	cols  []string
	sql   string
}

const maxCachedUpdates = 64

// cachedUpdateSQL returns the UPDATE for set's columns (or, for op
// "delete", the fenced DELETE), building (and validating) it only the
// first time a column list and fence column are seen.
func (t *Table) cachedUpdateSQL(op string, set []Pair, f fence) (string, error) {
	var cur []cachedUpdate
	p := t.updates.Load()
	if p != nil {
		cur = *p
	}
	del := op == "delete"
next:
	for i := range cur {
		e := &cur[i]
		if len(e.cols) != len(set) || e.del != del || e.fence != f.column {
			continue
		}
		for j, c := range e.cols {
			if set[j].Column != c {
				continue next
			}
		}
		return e.sql, nil
	}
	var query string
	var err error
	if del {
		query = t.fencedDeleteSQL(f)
	} else {
		query, err = t.updateSQL(op, set, f)
	}
	if err != nil || len(cur) >= maxCachedUpdates {
		return query, err
	}
	cols := make([]string, len(set))
	for i, p := range set {
		cols[i] = p.Column
	}
	grown := make([]cachedUpdate, len(cur), len(cur)+1)
	copy(grown, cur)
	grown = append(grown, cachedUpdate{del: del, fence: f.column, cols: cols, sql: query})
	// Losing this race only means another goroutine's entry was stored;
	// the statement is rebuilt next time, never wrong.
	t.updates.CompareAndSwap(p, &grown)
	return query, nil
}

// NewTable describes table name (optionally schema-qualified with a dot).
// Identifiers are validated and quoted here, once.
func NewTable(name string, opts ...Option) (*Table, error) {
	cfg := config{dialect: Postgres, keys: []string{"id"}, version: "version", observer: observe.Nop{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if !cfg.dialect.valid() {
		return nil, inputErr("table", "dialect", cfg.dialect.name()+" is not a known dialect", ErrInvalidArg)
	}
	qt, err := vmodel.QuoteTable("table", name, cfg.dialect.quoteChar())
	if err != nil {
		return nil, err
	}
	if len(cfg.keys) == 0 {
		return nil, inputErr("table", "key", "no key columns: a write without a key would touch every row", ErrInvalidArg)
	}
	t := &Table{name: name, cfg: cfg, qTable: qt}
	for i, k := range cfg.keys {
		if err := checkIdent("table", "key column", k); err != nil {
			return nil, err
		}
		for _, prev := range cfg.keys[:i] {
			if prev == k {
				return nil, inputErr("table", "key column", fmt.Sprintf("%q named twice", k), ErrInvalidArg)
			}
		}
		if k == cfg.version {
			return nil, inputErr("table", "key column", fmt.Sprintf("%q is also the version column", k), ErrInvalidArg)
		}
		t.qKeys = append(t.qKeys, t.quote(k))
	}
	if err := checkIdent("table", "version column", cfg.version); err != nil {
		return nil, err
	}
	t.qVersion = t.quote(cfg.version)
	t.cte = t.quote("sqlock_cas")
	if t.cte == qt {
		t.cte = t.quote("sqlock_cas_")
	}

	b := sqlBuf{d: cfg.dialect}
	t.stmt().Delete(&b.b, b.paramTo)
	t.deleteSQL = b.b.String()

	b = sqlBuf{d: cfg.dialect}
	b.str("SELECT ")
	b.str(t.qVersion)
	b.str(" FROM ")
	b.str(qt)
	t.whereKey(&b)
	b.str(cfg.dialect.lockingRead())
	t.probeSQL = b.b.String()

	b = sqlBuf{d: cfg.dialect}
	b.str("SELECT 1 FROM ")
	b.str(qt)
	t.whereKey(&b)
	t.existsSQL = b.b.String()
	return t, nil
}

// MustTable is NewTable for package-level variables with constant
// arguments; it panics on error.
func MustTable(name string, opts ...Option) *Table {
	t, err := NewTable(name, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// quote quotes a checked identifier for the table's dialect.
func (t *Table) quote(name string) string {
	var b strings.Builder
	t.cfg.dialect.writeQuoted(&b, name)
	return b.String()
}

// stmt is the table's versioned write shape, shared with sqlxhelpers.
func (t *Table) stmt() vmodel.Stmt {
	return vmodel.Stmt{Table: t.qTable, Keys: t.qKeys, Version: t.qVersion}
}

// whereKey writes " WHERE k1 = $a AND k2 = $b" with fresh placeholders.
func (t *Table) whereKey(b *sqlBuf) { t.stmt().WhereKey(&b.b, b.paramTo) }

// fencedStmt is stmt with f's fence column.
func (t *Table) fencedStmt(f fence) vmodel.Stmt {
	st := t.stmt()
	if f.on {
		st.Fence = t.quote(f.column)
	}
	return st
}

func (t *Table) fencedDeleteSQL(f fence) string {
	b := sqlBuf{d: t.cfg.dialect}
	t.fencedStmt(f).Delete(&b.b, b.paramTo)
	return b.b.String()
}

func (t *Table) updateSQL(op string, set []Pair, f fence) (string, error) {
	size := 40 + len(t.qTable) + 2*len(t.qVersion) + 8*len(t.qKeys)
	for _, k := range t.qKeys {
		size += len(k)
	}
	for i, p := range set {
		if err := checkIdent(op, "set column", p.Column); err != nil {
			return "", err
		}
		if p.Column == t.cfg.version {
			return "", inputErr(op, "set column", fmt.Sprintf("%q is the version column, which the write itself increments", p.Column), ErrInvalidArg)
		}
		for _, prev := range set[:i] {
			if prev.Column == p.Column {
				return "", inputErr(op, "set column", fmt.Sprintf("%q assigned twice", p.Column), ErrInvalidArg)
			}
		}
		size += len(p.Column) + 9
	}
	b := sqlBuf{d: t.cfg.dialect}
	b.b.Grow(size)
	setCol := func(w *strings.Builder, i int) { b.d.writeQuoted(w, set[i].Column) }
	t.fencedStmt(f).Update(&b.b, len(set), setCol, b.paramTo)
	return b.b.String(), nil
}

// Update runs, in one round trip,
//
//	UPDATE t SET c1 = $1, …, version = version + 1 WHERE key = $k AND version = $v
//
// and returns the new version, expected + 1. When no row matches it
// returns expected and a *StaleError (errors.Is(err, ErrStale)); when the
// key is missing, expected is at the largest value V can hold, or any
// argument is invalid it returns a typed error without sending anything.
// With no assignments it only increments the version (a "touch" that makes
// concurrent writers of the same row go stale).
//
// A [Fence] among the assignments makes it a fenced write: a row whose
// fence is past the token is refused with *[FencedError] ([ErrFenced]).
// A fenced write that matches no row runs one more query, to tell a fenced
// row from a stale or missing one; a write that succeeds costs the same
// one round trip.
//
// The version's Go type V decides where it overflows: an int8 version
// stops at 127 with *OverflowError rather than wrapping.
func Update[V Integer](ctx context.Context, db DB, t *Table, key any, expected V, set ...Pair) (V, error) {
	// Next refuses a value outside the type's range or at its largest, so
	// the conversion below is exact.
	if _, err := vmodel.Next(expected); err != nil {
		return expected, err
	}
	set, f, err := splitFence("update", set)
	if err != nil {
		return expected, err
	}
	if _, err := t.update(ctx, db, key, int64(expected), set, f); err != nil {
		return expected, err
	}
	return expected + 1, nil
}

// update runs the versioned UPDATE; the caller has checked that exp + 1
// fits the version's type.
func (t *Table) update(ctx context.Context, db DB, key any, exp int64, set []Pair, f fence) (int64, error) {
	const op = "update"
	if t == nil {
		return exp, inputErr(op, "table", "nil *Table", ErrInvalidArg)
	}
	if nilcheck.Is(db) {
		return exp, inputErr(op, "db", "nil database handle", sqlock.ErrNilHandle)
	}
	if err := f.check(op, t, set); err != nil {
		return exp, err
	}
	query, err := t.cachedUpdateSQL(op, set, f)
	if err != nil {
		return exp, err
	}
	args := make([]any, len(set), len(set)+len(t.qKeys)+3)
	for i, p := range set {
		args[i] = p.Value
	}
	if f.on {
		args = append(args, f.token)
	}
	if args, err = t.appendKey(args, key); err != nil {
		return exp, err
	}
	args = append(args, exp)
	if f.on {
		args = append(args, f.token)
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return exp, fmt.Errorf("versioned: update %s: %w", t.name, err)
	}
	if err := t.affected(ctx, db, res, key, exp, op, f); err != nil {
		return exp, err
	}
	return exp + 1, nil
}

// Delete runs, in one round trip,
//
//	DELETE FROM t WHERE key = $1 AND version = $2
//
// and returns a *StaleError (errors.Is(err, ErrStale)) when no row matches,
// or a typed error without sending anything when the key is missing or an
// argument is invalid.
//
// A [Fence] makes it a fenced delete, as for [Update]:
//
//	DELETE FROM t WHERE key = $1 AND version = $2 AND COALESCE(fence, 0) <= $3
//
// Only Fence pairs may be passed; an assignment is *[InputError].
func Delete[V Integer](ctx context.Context, db DB, t *Table, key any, expected V, fence ...Pair) error {
	exp, err := vmodel.Int64(expected)
	if err != nil {
		return err
	}
	set, f, err := splitFence("delete", fence)
	if err != nil {
		return err
	}
	if len(set) > 0 {
		return inputErr("delete", "fence", fmt.Sprintf("%q is not a Fence: a delete assigns nothing", set[0].Column), ErrInvalidArg)
	}
	return t.delete(ctx, db, key, exp, f)
}

func (t *Table) delete(ctx context.Context, db DB, key any, exp int64, f fence) error {
	const op = "delete"
	if t == nil {
		return inputErr(op, "table", "nil *Table", ErrInvalidArg)
	}
	if nilcheck.Is(db) {
		return inputErr(op, "db", "nil database handle", sqlock.ErrNilHandle)
	}
	query := t.deleteSQL
	if f.on {
		if err := f.check(op, t, nil); err != nil {
			return err
		}
		query, _ = t.cachedUpdateSQL(op, nil, f)
	}
	args := make([]any, 0, len(t.qKeys)+2)
	args, err := t.appendKey(args, key)
	if err != nil {
		return err
	}
	args = append(args, exp)
	if f.on {
		args = append(args, f.token)
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("versioned: delete from %s: %w", t.name, err)
	}
	return t.affected(ctx, db, res, key, exp, op, f)
}

// affected turns the result of a versioned write into nil, *StaleError,
// *FencedError or *RowsError.
func (t *Table) affected(ctx context.Context, db DB, res sql.Result, key any, exp int64, op string, f fence) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("versioned: %s %s: rows affected: %w", op, t.name, err)
	}
	if n == 1 {
		return nil // the common case, decided before the guard is built
	}
	g := vguard.Guard{Table: t.name, Key: key, Expected: exp, Op: op,
		Observer: t.cfg.observer, Source: "versioned", System: t.cfg.dialect.system()}
	switch {
	case f.on:
		g.Token = f.token
		g.Probe = func(ctx context.Context) (ver, fen sql.NullInt64, err error) {
			b := sqlBuf{d: t.cfg.dialect}
			t.fencedStmt(f).Probe(&b.b, b.paramTo)
			b.str(t.cfg.dialect.lockingRead())
			err = t.probeRow(ctx, db, b.b.String(), key, &ver, &fen)
			return ver, fen, err
		}
	case t.cfg.probe:
		g.Probe = func(ctx context.Context) (ver, fen sql.NullInt64, err error) {
			err = t.probeRow(ctx, db, t.probeSQL, key, &ver)
			return ver, fen, err
		}
	}
	return g.Outcome(ctx, n)
}

// probeRow reads the row by key into dest, with query (the probe's
// SELECT).
func (t *Table) probeRow(ctx context.Context, q DB, query string, key any, dest ...any) error {
	args, err := t.appendKey(make([]any, 0, len(t.qKeys)), key)
	if err != nil {
		return err
	}
	return q.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// appendKey appends the key values in column order, refusing a missing key.
func (t *Table) appendKey(args []any, key any) ([]any, error) {
	ck, composite := key.(CompositeKey)
	if len(t.qKeys) == 1 {
		if composite {
			if len(ck) != 1 {
				return args, &KeyError{Table: t.name, Reason: fmt.Sprintf("a composite key of %d values for 1 key column", len(ck))}
			}
			key = ck[0]
		}
		if reason := t.missing(key); reason != "" {
			return args, &KeyError{Table: t.name, Column: t.cfg.keys[0], Reason: reason}
		}
		return append(args, key), nil
	}
	if !composite {
		return args, &KeyError{Table: t.name, Reason: fmt.Sprintf("%d key columns need a CompositeKey, got %T", len(t.qKeys), key)}
	}
	if len(ck) != len(t.qKeys) {
		return args, &KeyError{Table: t.name, Reason: fmt.Sprintf("a composite key of %d values for %d key columns", len(ck), len(t.qKeys))}
	}
	for i, v := range ck {
		if reason := t.missing(v); reason != "" {
			return args, &KeyError{Table: t.name, Column: t.cfg.keys[i], Reason: reason}
		}
	}
	return append(args, ck...), nil
}

// missing says why v cannot be a key value, or "" when it can.
func (t *Table) missing(v any) string { return vmodel.MissingKey(v, t.cfg.zeroKey) }
