package lease

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
	"github.com/sqlock/sqlock/internal/pgident"
	"github.com/sqlock/sqlock/internal/ttllock"
	"github.com/sqlock/sqlock/observe"
)

// DefaultTimeout bounds Acquire's wait unless WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Second

// DefaultTable is the table leases live in unless WithTable says otherwise.
const DefaultTable = "sqlock_leases"

type config struct {
	ttllock.Config // the timeout, the maximum hold, the observer
	table          tableName
	poll           time.Duration // > 0: wait by polling, never LISTEN
	holder         string        // stored with every lease: WithHolder
	payload        []byte        // stored with every lease: WithPayload; nil: none
}

func defaultConfig() config {
	return config{Config: kit.NewConfig(), table: tableName{pgident.Table{Name: DefaultTable}}}
}

// Option configures a Manager, Migrate or DDL.
type Option func(*config) error

// WithTable names the leases table: an identifier, optionally qualified by
// a schema ("locks.leases"), of letters, digits and underscores, at most 53
// bytes for the table (its token sequence is named table_token_seq) and 63
// for the schema. It is quoted as given, so the case matters. The default
// is [DefaultTable].
func WithTable(name string) Option {
	return func(c *config) error {
		t, err := parseTable(name)
		if err != nil {
			return err
		}
		c.table = t
		return nil
	}
}

// WithTimeout bounds every Acquire's wait (default [DefaultTimeout]); a
// context deadline that comes earlier wins. It must be positive (zero or
// negative: an error matching [sqlock.ErrInvalidOption]): no wait is
// unbounded, and TryAcquire does not wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetTimeout(d) }
}

// WithPolling makes waiters poll for a release every interval (each wait
// drawn at random between interval/2 and interval, and never past the
// holder's expiry) instead of listening for the release's notification.
// Without it a Manager polls by itself, every 50 ms, where LISTEN cannot
// work: with a driver that cannot LISTEN (lib/pq), and behind a pooler in
// transaction mode (PgBouncer), which it detects before its first LISTEN.
// It must be positive.
func WithPolling(interval time.Duration) Option {
	return func(c *config) error {
		if interval <= 0 {
			return errkind.New(sqlock.ErrInvalidOption, "lease: polling interval %v must be positive", interval)
		}
		c.poll = interval
		return nil
	}
}

// WithMaxHold caps how long any lease of the Manager is held: Lost fires
// once d has passed since it was acquired, however often it was renewed.
// It must be positive; the default is no cap.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error { return c.SetMaxHold(d) }
}

// WithObserver reports each acquisition (observe.LockAcquire with the
// outcome and the wait), each lease's end (observe.LockRelease: Released,
// or Lost, with the hold time) and each renewal that failed and will be
// tried again (observe.Retry, cause "renew") to o, with Source "lease",
// System "postgresql" and the lease's name as Name. Several WithObserver
// options add up ([observe.Multi]); a nil o adds nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) error {
		c.AddObserver(o)
		return nil
	}
}

// MaxHolderLen and MaxPayloadLen bound [WithHolder]'s label and
// [WithPayload]'s bytes (as redislock's do): they are stored in the lease's
// row for operators, not a place for data.
const (
	MaxHolderLen  = 256
	MaxPayloadLen = 4096
)

// WithHolder stores label with every lease the Manager takes, for
// operators: who holds it (a host, a pid, a job id), where the owner id is
// random. [Lease.Holder] reads it back; inspect and `sqlock leases` show
// it. It is UTF-8 text without NUL bytes of at most [MaxHolderLen] bytes;
// otherwise every acquisition fails with an error matching [ErrInvalid]
// and [sqlock.ErrInvalidArgument], with nothing sent. The default is "".
// For a label per job, make a Manager per job on the same pool: a Manager
// holds no connection while nobody waits.
func WithHolder(label string) Option {
	return func(c *config) error {
		switch {
		case len(label) > MaxHolderLen:
			return errkind.New(ErrInvalid, "lease: holder label of %d bytes is longer than %d", len(label), MaxHolderLen)
		case !utf8.ValidString(label) || strings.IndexByte(label, 0) >= 0:
			return errkind.New(ErrInvalid, "lease: holder label is not UTF-8 text without NUL bytes")
		}
		c.holder = label
		return nil
	}
}

// WithPayload stores a copy of p with every lease the Manager takes, as
// WithHolder stores its label: a few bytes an operator or another process
// may want beside it (a job's parameters, an address). [Lease.Payload]
// reads it back; inspect shows it. At most [MaxPayloadLen] bytes (longer:
// an error matching [ErrInvalid] and [sqlock.ErrInvalidArgument], reported
// by every acquisition, and nothing is sent). nil (the default) stores none.
func WithPayload(p []byte) Option {
	return func(c *config) error {
		if len(p) > MaxPayloadLen {
			return errkind.New(ErrInvalid, "lease: payload of %d bytes is longer than %d", len(p), MaxPayloadLen)
		}
		c.payload = bytes.Clone(p)
		return nil
	}
}

func buildConfig(opts []Option) (config, error) {
	c := defaultConfig()
	err := ttllock.Apply(&c, opts)
	return c, err
}
