package lease

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock/internal/pgerror"
)

// Handle is the database handle a Manager runs on: a database/sql pool
// (pgx's stdlib driver, lib/pq or any PostgreSQL driver) or a pgx pool.
type Handle interface {
	*sql.DB | *pgxpool.Pool
}

// errNoRows is what backend.queryRow returns for an empty result, from
// either driver.
var errNoRows = errors.New("lease: no rows")

// errNoListen: the backend cannot LISTEN (a database/sql driver other than
// pgx's stdlib); waiters poll.
var errNoListen = errors.New("lease: this driver cannot LISTEN; waiting by polling")

// A backend runs the Manager's statements on pooled connections; none is
// pinned except the listener's. Its errors name the cure of a pooler's
// prepared-statement failure (pgerr.PoolerPrepared).
type backend interface {
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
	// exec runs a query without arguments, which both drivers send with
	// the simple protocol (so it may hold several statements, run as one
	// implicit transaction).
	exec(ctx context.Context, query string) error
	// listen takes a connection of its own, calls check with it (an error
	// ends the listener), LISTENs on channel, calls ready once the LISTEN is
	// in force, then notify for every notification, until ctx ends or the
	// connection fails. It returns errNoListen, before check, if the driver
	// cannot.
	listen(ctx context.Context, channel string, check func(querier) error, ready func(), notify func(payload string)) error
	// inTx runs fn in a transaction on a pooled connection (not one the
	// caller holds), and rolls it back.
	inTx(ctx context.Context, fn func(querier) error) error
}

func newBackend[DB Handle](db DB) backend {
	switch h := any(db).(type) {
	case *sql.DB:
		if h != nil {
			return sqlBackend{h}
		}
	case *pgxpool.Pool:
		if h != nil {
			return pgxBackend{h}
		}
	}
	return nil
}

type sqlBackend struct{ db *sql.DB }

func (b sqlBackend) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	err := b.db.QueryRowContext(ctx, query, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoRows
	}
	return pgerror.PoolerPrepared(err)
}

func (b sqlBackend) exec(ctx context.Context, query string) error {
	_, err := b.db.ExecContext(ctx, query)
	return pgerror.PoolerPrepared(err)
}

// pgxConner is a driver connection with the *pgx.Conn underneath (pgx's
// stdlib driver, and wrappers of it).
type pgxConner interface{ Conn() *pgx.Conn }

func (b sqlBackend) listen(ctx context.Context, channel string, check func(querier) error, ready func(), notify func(string)) error {
	c, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var lerr error
	err = c.Raw(func(dc any) error {
		pcr, ok := dc.(pgxConner)
		if !ok {
			lerr = errNoListen
			return nil
		}
		if lerr = listenOn(ctx, pcr.Conn(), channel, check, ready, notify); lerr != nil && !errors.Is(lerr, errListenDone) {
			return driver.ErrBadConn // discard a connection whose state is in doubt
		}
		return nil
	})
	if lerr != nil {
		return lerr
	}
	return err
}

type pgxBackend struct{ p *pgxpool.Pool }

// The pgx backend sends a statement once more when the first try failed
// before anything reached the server (pgconn.SafeToRetry: a pooled
// connection the network broke while it sat idle). Without it a Release
// after a network blip would leave the lease to its TTL, and an Acquire
// fail, for a statement the server never saw. database/sql does the same
// by itself (driver.ErrBadConn).
func (b pgxBackend) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	err := b.p.QueryRow(ctx, query, args...).Scan(dest...)
	if neverSent(ctx, err) {
		err = b.p.QueryRow(ctx, query, args...).Scan(dest...)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return errNoRows
	}
	return pgerror.PoolerPrepared(err)
}

func (b pgxBackend) exec(ctx context.Context, query string) error {
	_, err := b.p.Exec(ctx, query)
	if neverSent(ctx, err) {
		_, err = b.p.Exec(ctx, query)
	}
	return pgerror.PoolerPrepared(err)
}

// neverSent reports whether err says the statement never reached the
// server and the context still allows another try.
func neverSent(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && pgconn.SafeToRetry(err)
}

func (b pgxBackend) listen(ctx context.Context, channel string, check func(querier) error, ready func(), notify func(string)) error {
	c, err := b.p.Acquire(ctx)
	if err != nil {
		return err
	}
	err = listenOn(ctx, c.Conn(), channel, check, ready, notify)
	if err != nil && !errors.Is(err, errListenDone) {
		c.Conn().Close(context.Background()) // the pool then destroys it
	}
	c.Release()
	return err
}

// errListenDone: the listener stopped because it was asked to, and left its
// connection clean (UNLISTEN confirmed).
var errListenDone = errors.New("lease: listener stopped")

// unlistenTimeout bounds the UNLISTEN that cleans a listener's connection
// before it goes back to the pool.
const unlistenTimeout = time.Second

func listenOn(ctx context.Context, c *pgx.Conn, channel string, check func(querier) error, ready func(), notify func(string)) error {
	if err := check(pgxQuerier(c)); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	ready()
	for {
		n, err := c.WaitForNotification(ctx)
		if ctx.Err() != nil {
			uctx, cancel := context.WithTimeout(context.Background(), unlistenTimeout)
			defer cancel()
			if _, err := c.Exec(uctx, "UNLISTEN *"); err != nil {
				return err
			}
			return errListenDone
		}
		if err != nil {
			return err
		}
		if n != nil {
			notify(n.Payload)
		}
	}
}
