package matrix

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"testing"
)

// Mode is the size of a run, from the MATRIX environment variable.
type Mode string

const (
	// Quick (MATRIX=quick, or unset: what make test and so CI run) proves
	// the harness works end to end: every row, workload and fault, on both
	// key shapes and both networks, with a few operations each. Its figures
	// are not the published ones.
	Quick Mode = "quick"
	// Full (MATRIX=full, make matrix's default) is the published figures,
	// under 30 minutes on two cores.
	Full Mode = "full"
)

// ModeFromEnv returns the mode MATRIX names: Quick when it is unset or
// empty, or "quick"; Full for "full". Any other value is an error, so that
// neither a typo nor an old mode name runs a grid nobody asked for.
func ModeFromEnv() (Mode, error) {
	switch v := Mode(os.Getenv("MATRIX")); v {
	case "", Quick:
		return Quick, nil
	case Full:
		return Full, nil
	default:
		return "", fmt.Errorf("matrix: MATRIX=%q: want %q, %q or unset", v, Quick, Full)
	}
}

// Workload is one of the demo's three workloads.
type Workload string

const (
	// Payment: every contender receives the same orders (a client's
	// retry); each order must be charged once. Anomaly: an order with two
	// or more charges.
	Payment Workload = "payment"
	// Seat: every contender wants the same seats; each seat must be booked
	// once. Anomaly: a seat with two or more bookings.
	Seat Workload = "seat"
	// Stock: contenders decrement a quantity without going below zero.
	// Anomaly: a negative quantity, or a key whose decrements recorded
	// differ from what its quantity lost (a lost update).
	Stock Workload = "stock"
)

// Workloads is every workload, in the order docs/matrix.md prints them.
var Workloads = []Workload{Payment, Seat, Stock}

// Result is the outcome of one operation that did not fail.
type Result int

const (
	// Done: the operation was applied (charged, booked, decremented).
	Done Result = iota + 1
	// Refused: a correct no (already charged, already booked, sold out).
	Refused
)

func (r Result) String() string {
	switch r {
	case Done:
		return "done"
	case Refused:
		return "refused"
	}
	return "invalid"
}

// An Actor performs the operations of one contender. Each contender's Op
// calls are sequential; different actors run concurrently.
type Actor interface {
	Op(ctx context.Context, key string) (Result, error)
}

// ActorFunc is an Actor written as a function.
type ActorFunc func(ctx context.Context, key string) (Result, error)

// Op calls f.
func (f ActorFunc) Op(ctx context.Context, key string) (Result, error) { return f(ctx, key) }

// Row is one mechanism of the table.
type Row struct {
	// Mechanism is the printed name: "versioned+retry", "advisory",
	// "lease+Guard", "redislock", "by hand: UPDATE … WHERE version", …
	Mechanism string
	// Group is the row group the ratios are taken in ("optimistic",
	// "lock", "idempotency"): each cell's ops/s is divided by the best of
	// its group in the same cell. Empty is a group of its own.
	Group string
	// Workloads are the load cells the row runs; empty for a row that
	// only has faults.
	Workloads []Workload
	// Open returns one Actor per contender (len == c.Contenders) and a
	// function that releases what they hold; the store is reached over
	// c.Net (c.DB, c.DSN, c.Dial) and every request counted in
	// c.RoundTrips.
	Open func(ctx context.Context, c *Cell) ([]Actor, func(), error)
	// Check, when set, replaces c.State.Check for a row whose state lives
	// elsewhere than c.State (a DynamoDB table, say).
	Check func(ctx context.Context, c *Cell) (anomalies int, example string, err error)
	// Faults are run after the load cells.
	Faults []Fault
}

// Net is how a cell reaches PostgreSQL.
type Net string

const (
	Loopback Net = "loopback"    // the server's own address
	Proxy    Net = "proxy-0.5ms" // pgtest's proxy, 0.25 ms each way: 0.5 ms a round trip
)

// Keys says whether a cell's contenders share keys.
type Keys string

const (
	// HotKey: for payment and seat every contender walks the same keys
	// (all of them want order 1, then order 2, …); for stock every
	// contender decrements one key.
	HotKey Keys = "hot"
	// ManyKeys: each contender has keys of its own: no contention but the
	// store's.
	ManyKeys Keys = "many"
)

// Cell is one run of one row on one workload.
type Cell struct {
	Workload   Workload
	Contenders int
	Keys       Keys
	Net        Net
	// State is the workload's tables, fresh for this cell.
	State *State
	// DB reaches the database over Net; its round trips are counted in
	// RoundTrips. Its pool has room for every contender.
	DB *sql.DB
	// DSN reaches the same database over Net, for a row that opens its
	// own handle (pgxpool, GORM); give it Dial so that its round trips
	// are counted too.
	DSN string
	// Dial dials over Net and counts round trips in RoundTrips: put it in
	// a pgx configuration's DialFunc.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RoundTrips counts the cell's round trips on the wire; a row whose
	// mechanism talks to another store (Redis, etcd, DynamoDB) calls Add
	// once per request.
	RoundTrips *RoundTrips
	// T is the cell's test, for t.Cleanup and logging.
	T testing.TB
}
