package lockedtx

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
)

// Options as package txlock's set them (txlock cannot be imported here).
type option = func(*Config)

func shared() option                     { return func(c *Config) { c.Shared = true } }
func tryOnce() option                    { return func(c *Config) { c.TryOnce = true } }
func withTimeout(d time.Duration) option { return func(c *Config) { c.Timeout = d } }

// planOf is newPlan for a set of keys: the first as the call's key, the
// others as AlsoLock's.
func planOf(t *testing.T, keys []advisory.Key, opts []option) *plan {
	t.Helper()
	c := newConfig(append([]option{func(c *Config) { c.More = keys[1:] }}, opts...))
	p, err := newPlan(keys[0], &c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The bound form the batch sends: one statement per key in canonical order,
// the timeout (as text, whole milliseconds) only with the first, arguments
// typed by casts so that the server's inference cannot pick another
// overload.
func TestLockQueries(t *testing.T) {
	const to = " FROM (SELECT pg_catalog.set_config('lock_timeout', $1::text, true)) s"
	for _, tc := range []struct {
		name string
		keys []advisory.Key
		opts []option
		want []lockQuery
	}{
		{"default", []advisory.Key{advisory.KeyInt(42)}, nil,
			[]lockQuery{{"SELECT pg_catalog.pg_advisory_xact_lock($2::int8)" + to, []any{"5000ms", int64(42)}}}},
		{"shared, canonical order, duplicates once",
			[]advisory.Key{advisory.KeyPair(-1, 2), advisory.KeyInt(math.MaxInt64), advisory.KeyInt(math.MinInt64), advisory.KeyInt(math.MaxInt64)},
			[]option{shared(), withTimeout(1500 * time.Microsecond)},
			[]lockQuery{
				{"SELECT pg_catalog.pg_advisory_xact_lock_shared($2::int8)" + to, []any{"2ms", int64(math.MinInt64)}},
				{"SELECT pg_catalog.pg_advisory_xact_lock_shared($1::int8)", []any{int64(math.MaxInt64)}},
				{"SELECT pg_catalog.pg_advisory_xact_lock_shared($1::int4, $2::int4)", []any{int32(-1), int32(2)}},
			}},
		{"try once: no timeout, answers read", []advisory.Key{advisory.KeyInt(7), advisory.KeyPair(1, 2)}, []option{tryOnce(), withTimeout(time.Second)},
			[]lockQuery{
				{"SELECT pg_catalog.pg_try_advisory_xact_lock($1::int8)", []any{int64(7)}},
				{"SELECT pg_catalog.pg_try_advisory_xact_lock($1::int4, $2::int4)", []any{int32(1), int32(2)}},
			}},
	} {
		p := planOf(t, tc.keys, tc.opts)
		if fmt.Sprint(p.queries) != fmt.Sprint(tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, p.queries, tc.want)
		}
	}
}

// The exact statements txlock sends: keys as integer literals in canonical
// order, duplicates once, the timeout in whole milliseconds.
func TestLockSQL(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []advisory.Key
		opts []option
		want string
	}{
		{"default", []advisory.Key{advisory.KeyInt(42)}, nil,
			"SET LOCAL lock_timeout = '5000ms';SELECT pg_catalog.pg_advisory_xact_lock(42)"},
		{"rounded up", []advisory.Key{advisory.KeyInt(1)}, []option{withTimeout(1500*time.Microsecond + 1)},
			"SET LOCAL lock_timeout = '2ms';SELECT pg_catalog.pg_advisory_xact_lock(1)"},
		{"never 0", []advisory.Key{advisory.KeyInt(1)}, []option{withTimeout(time.Nanosecond)},
			"SET LOCAL lock_timeout = '1ms';SELECT pg_catalog.pg_advisory_xact_lock(1)"},
		{"capped", []advisory.Key{advisory.KeyInt(1)}, []option{withTimeout(math.MaxInt64)},
			"SET LOCAL lock_timeout = '2147483647ms';SELECT pg_catalog.pg_advisory_xact_lock(1)"},
		{"shared, canonical order, duplicates once",
			[]advisory.Key{advisory.KeyPair(-1, 2), advisory.KeyInt(math.MaxInt64), advisory.KeyInt(math.MinInt64), advisory.KeyInt(math.MaxInt64)},
			[]option{shared(), withTimeout(time.Second)},
			"SET LOCAL lock_timeout = '1000ms';SELECT pg_catalog.pg_advisory_xact_lock_shared(-9223372036854775808);" +
				"SELECT pg_catalog.pg_advisory_xact_lock_shared(9223372036854775807);SELECT pg_catalog.pg_advisory_xact_lock_shared(-1,2)"},
		{"try once ignores the timeout", []advisory.Key{advisory.KeyInt(7), advisory.KeyInt(3)}, []option{tryOnce(), withTimeout(time.Second)},
			"SELECT (CASE WHEN pg_catalog.pg_try_advisory_xact_lock(3) THEN '1' ELSE 'sqlock: advisory lock held elsewhere' END)::int;" +
				"SELECT (CASE WHEN pg_catalog.pg_try_advisory_xact_lock(7) THEN '1' ELSE 'sqlock: advisory lock held elsewhere' END)::int"},
		{"try once shared", []advisory.Key{advisory.KeyPair(1, 2)}, []option{tryOnce(), shared()},
			"SELECT (CASE WHEN pg_catalog.pg_try_advisory_xact_lock_shared(1,2) THEN '1' ELSE 'sqlock: advisory lock held elsewhere' END)::int"},
	} {
		p := planOf(t, tc.keys, tc.opts)
		if got := p.lockText(p.timeout); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// Transaction modes are checked against the ones PostgreSQL knows and
// spelled by this package: a mode it does not know is an invalid option,
// refused before anything is sent.
func TestTransactionModes(t *testing.T) {
	o, err := normalPgxOptions(pgx.TxOptions{IsoLevel: "SERIALIZABLE", AccessMode: pgx.ReadOnly, DeferrableMode: pgx.Deferrable,
		CommitQuery: "COMMIT", BeginQuery: "BEGIN"})
	if err != nil || o != (pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly, DeferrableMode: pgx.Deferrable, CommitQuery: "COMMIT"}) {
		t.Fatalf("got %+v, %v", o, err)
	}
	for _, bad := range []pgx.TxOptions{{IsoLevel: "snapshot"}, {AccessMode: "read only; DROP TABLE x"}, {DeferrableMode: "maybe"}} {
		c := newConfig([]option{func(c *Config) { c.PgxOpts = bad }})
		if _, err := newPlan(advisory.KeyInt(1), &c); !errors.Is(err, sqlock.ErrInvalidOption) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// BenchmarkNewPlan is the plan of the usual call (one key, the default
// timeout), made for every call.
func BenchmarkNewPlan(b *testing.B) {
	c := newConfig[option](nil)
	key := advisory.KeyInt(42)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newPlan(key, &c); err != nil {
			b.Fatal(err)
		}
	}
}
