package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/pgerror"
)

// errPooled: the listener's connection does not keep one server session, as
// behind PgBouncer in transaction or statement mode. A LISTEN there would
// land on a pooled server connection, and no notification would reach the
// waiter; the Manager's waiters poll instead.
var errPooled = errors.New("lease: the connection does not keep one server session (a pooler in transaction mode?); waiters poll")

// A querier runs one statement without arguments on one connection and
// scans its one row. Statements go with the simple protocol: one message,
// which any pooler forwards whole, whatever the driver's exec mode.
type querier func(ctx context.Context, query string, dest ...any) error

// pgxQuerier runs statements on c.
func pgxQuerier(c *pgx.Conn) querier {
	return func(ctx context.Context, query string, dest ...any) error {
		return c.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(dest...)
	}
}

// probeGUC carries the probe's token on the listener's server session.
const probeGUC = "sqlock.lease_probe"

const sessionQuery = "SELECT pg_catalog.pg_backend_pid(), coalesce(pg_catalog.current_setting('" + probeGUC + "', true), '')"

// probeRounds is how often the other connection's transaction is taken
// while the listener's session is checked.
const probeRounds = 3

// probeSession checks, before the listener LISTENs on c, that c keeps one
// server session: a session setting made on c is still there, with the same
// backend pid, on c's later statements, and is not seen by another pooled
// connection that holds a transaction open meanwhile, which a transaction
// pooler (reusing its most recently freed server connection first, as
// PgBouncer does) hands c's server connection, or else hands c another.
// It returns errPooled (wrapped) if c does not; an ended context or a lost
// connection as they are (not a verdict).
func probeSession(ctx context.Context, c querier, b backend) error {
	var tok [12]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	var pid int32
	var set string
	if err := c(ctx, "SELECT pg_catalog.pg_backend_pid(), pg_catalog.set_config('"+probeGUC+"', '"+token+"', false)",
		&pid, &set); err != nil {
		return probeFailed(ctx, err)
	}
	for range probeRounds {
		err := b.inTx(ctx, func(other querier) error {
			var p int32
			var t string
			if err := other(ctx, sessionQuery, &p, &t); err != nil {
				return probeFailed(ctx, err)
			}
			if p == pid || t == token {
				return fmt.Errorf("%w: two connections share server backend pid %d", errPooled, pid)
			}
			if err := c(ctx, sessionQuery, &p, &t); err != nil {
				return probeFailed(ctx, err)
			}
			if p != pid || t != token {
				return fmt.Errorf("%w: the server session changed between statements (backend pid %d, then %d)", errPooled, pid, p)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// probeFailed classifies an error of a probe statement: an ended context
// and a lost connection are not verdicts (the next listener probes again);
// a server that fails these plain statements (a prepared statement a pooler
// lost, SQLSTATE 26000) cannot be trusted to keep a LISTEN either.
func probeFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || pgerror.ConnectionLost(err) {
		return err
	}
	return fmt.Errorf("%w: the session probe failed: %w", errPooled, err)
}

func (b sqlBackend) inTx(ctx context.Context, fn func(querier) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(func(ctx context.Context, query string, dest ...any) error {
		return tx.QueryRowContext(ctx, query).Scan(dest...)
	})
}

func (b pgxBackend) inTx(ctx context.Context, fn func(querier) error) error {
	tx, err := b.p.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(func(ctx context.Context, query string, dest ...any) error {
		return tx.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(dest...)
	})
}
