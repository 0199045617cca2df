package sqlxhelpers

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/nilcheck"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

// Execer runs a statement. *sqlx.DB, *sqlx.Tx and *sqlx.Conn satisfy it, and
// so do *sql.DB, *sql.Tx and *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// defaultCacheSize is the number of rewritten statements, and separately of
// struct-driven statements, a Helper keeps by default.
const defaultCacheSize = 1024

// Option configures a Helper.
type Option func(*config)

type config struct {
	bindType  int
	bindSet   bool
	quoteChar byte   // '"', or '`' for MySQL
	system    string // the store's db.system.name, for observe.Event.System
	observer  observe.Observer
	cacheSize int
	mapper    *reflectx.Mapper
}

// WithBindType sets the bind variable style (sqlx.DOLLAR, sqlx.QUESTION,
// sqlx.AT, sqlx.NAMED) instead of the one sqlx knows for the handle's
// driver name.
func WithBindType(bindType int) Option {
	return func(c *config) { c.bindType, c.bindSet = bindType, true }
}

// WithObserver reports each stale write (observe.Stale, Source
// "versioned", as package versioned reports its own, and System the
// database the handle's driver name says: "postgresql", "mysql" for
// MySQL and MariaDB alike, "sqlite", or "" for a driver it does not know)
// to o. The default does
// nothing. Several WithObserver options add up ([observe.Multi]); a nil o
// adds nothing. The same holds in every sqlock package: see [observe].
func WithObserver(o observe.Observer) Option {
	return func(c *config) { c.observer = observe.Multi(c.observer, o) }
}

// WithCacheSize bounds how many rewritten statements (and, separately, how
// many struct-driven statements) the Helper keeps (default 1024). Past the bound, statements are still built, just not
// kept. n <= 0 keeps none.
func WithCacheSize(n int) Option { return func(c *config) { c.cacheSize = max(n, 0) } }

// WithMapper sets the field-name mapper (default: the handle's Mapper, as
// sqlx uses for named queries).
func WithMapper(m *reflectx.Mapper) Option {
	return func(c *config) {
		if m != nil {
			c.mapper = m
		}
	}
}

// Helper runs versioned writes for one sqlx database. Build it once with New
// and share it: it is safe for concurrent use, and it caches per struct type
// the columns it writes and per statement text the rewrites it made. On
// returns a view of it that runs on a transaction or a connection.
type Helper struct {
	ex Execer
	db *sqlx.DB
	s  *state
}

type state struct {
	cfg      config
	types    sync.Map // reflect.Type → *typeInfo
	rewrites boundedMap[rewriteKey, *namedPlan]
	plans    boundedMap[planKey, *structPlan]
}

// New returns a Helper for db. It fails with *versioned.InputError
// ([sqlock.ErrNilHandle]) when db is nil.
func New(db *sqlx.DB, opts ...Option) (*Helper, error) {
	if db == nil {
		return nil, &versioned.InputError{Op: "new", Arg: "db", Reason: "nil *sqlx.DB", Kind: sqlock.ErrNilHandle}
	}
	cfg := config{observer: observe.Nop{}, cacheSize: defaultCacheSize, mapper: db.Mapper}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if !cfg.bindSet {
		cfg.bindType = sqlx.BindType(db.DriverName())
	}
	if cfg.mapper == nil {
		cfg.mapper = reflectx.NewMapperFunc("db", toLower)
	}
	cfg.quoteChar = '"'
	cfg.system = systemOf(db.DriverName())
	if cfg.system == "mysql" {
		cfg.quoteChar = '`'
	}
	s := &state{cfg: cfg}
	s.rewrites.max = int64(cfg.cacheSize)
	s.plans.max = int64(cfg.cacheSize)
	return &Helper{ex: db, db: db, s: s}, nil
}

// On returns a view of h that runs its statements on ex (a *sqlx.Tx inside
// a transaction, a *sqlx.Conn …). It shares h's caches and options.
func (h *Helper) On(ex Execer) *Helper { return &Helper{ex: ex, db: h.db, s: h.s} }

func (h *Helper) execer(op string) (Execer, error) {
	if isNil(h.ex) {
		return nil, &versioned.InputError{Op: op, Arg: "db", Reason: "nil database handle", Kind: sqlock.ErrNilHandle}
	}
	return h.ex, nil
}

// isNil is internal/nilcheck's check, the one every package uses.
func isNil(x any) bool { return nilcheck.Is(x) }

// systemOf names the database a database/sql driver name serves as
// OpenTelemetry's db.system.name spells it: "mysql" for MariaDB too (one
// driver serves both, and asking the server would cost a query), "" for a
// driver name it does not know.
func systemOf(driverName string) string {
	switch driverName {
	case "postgres", "pgx", "pgx/v4", "pgx/v5", "pq-timeouts", "cloudsqlpostgres", "nrpostgres":
		return "postgresql"
	case "mysql", "nrmysql":
		return "mysql"
	case "sqlite3", "sqlite", "nrsqlite3":
		return "sqlite"
	}
	return ""
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// boundedMap is a concurrent map that stops taking new entries at max. It
// remembers the entry found last, so a caller that writes the same type to
// the same table (or runs the same statement) again and again compares one
// key instead of walking the map: fewer memory accesses on a path that runs
// right after a network round trip, when caches are cold.
type boundedMap[K comparable, V any] struct {
	m    sync.Map // K → *entry[K, V]
	n    atomic.Int64
	max  int64
	last atomic.Pointer[entry[K, V]]
}

type entry[K comparable, V any] struct {
	k K
	v V
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	if e := b.last.Load(); e != nil && e.k == k {
		return e.v, true
	}
	x, ok := b.m.Load(k)
	if !ok {
		var zero V
		return zero, false
	}
	e := x.(*entry[K, V])
	b.last.Store(e)
	return e.v, true
}

// put stores v under k unless the map is full, and returns the stored value
// (an earlier one when another goroutine stored first).
func (b *boundedMap[K, V]) put(k K, v V) V {
	if b.n.Load() >= b.max {
		return v
	}
	x, loaded := b.m.LoadOrStore(k, &entry[K, V]{k: k, v: v})
	if !loaded {
		b.n.Add(1)
	}
	return x.(*entry[K, V]).v
}

// structArg checks that arg is a non-nil pointer to a struct and returns it.
func structArg(op string, arg any) (reflect.Value, error) {
	rv := reflect.ValueOf(arg)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return rv, &versioned.InputError{Op: op, Arg: "value",
			Reason: fmt.Sprintf("%T is not a non-nil pointer to a struct", arg), Kind: versioned.ErrInvalidArg}
	}
	return rv, nil
}

// readField returns the value at index in struct value v, or nil when a nil
// embedded pointer lies on the way.
func readField(v reflect.Value, index []int) any {
	for _, i := range index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v.Interface()
}
