package advisory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/hash"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// verify runs the server probe once per Locker; a refusal is remembered, a
// connection failure is not.
func (l *Locker) verify(ctx context.Context) error {
	if l.verified.Load() {
		return nil
	}
	select {
	case l.probeSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.probeSem }()
	if l.verified.Load() {
		return nil
	}
	if l.probeErr != nil {
		return l.probeErr
	}
	err := probe(ctx, l.b, l.est.ObserveRTT)
	if err == nil {
		l.verified.Store(true)
		return nil
	}
	if errors.Is(err, sqlock.ErrUnsupported) {
		l.probeErr = err
		l.cfg.log.Error("advisory: server refused for session locks", "error", err)
	}
	return err
}

// probeText is hashed by the server and by package hash; they must agree.
const probeText = "sqlock advisory probe: hashtext vs hash.Text"

const probeGUC = "sqlock.probe"

// poolerAdvice ends the refusal behind a transaction-mode pooler: what works
// there instead.
const poolerAdvice = "session locks need a direct or session-pooled connection; " +
	"behind this pooler use package lease (a lock held across transactions, with a fencing token) " +
	"or package txlock (a lock for one transaction)"

func unsupported(format string, args ...any) error {
	return &Error{Op: "verify", Err: errUnsupported, Cause: fmt.Errorf(format, args...)}
}

// probeFailed classifies an error of a probe statement: connection trouble
// and an ended context are not verdicts; any other answer is — a server
// that fails these statements is not a PostgreSQL this package can use
// (SQLSTATE 42883: no such function, as on CockroachDB; 26000: a prepared
// statement vanished, because a pooler moved the session; an engine that
// does not speak this SQL at all).
func probeFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || pgerror.ConnectionLost(err) {
		return err
	}
	if code := pgerror.Code(err); code == pgerror.InvalidStatementName {
		return unsupported("a prepared statement vanished between statements on one connection (a pooler in transaction mode?): %w", err)
	}
	return unsupported("the server failed the PostgreSQL advisory-lock probe: %w", err)
}

// connWaitError is a probe's failure to take a connection from the pool:
// a wait for the pool, not a verdict on the server.
type connWaitError struct{ err error }

func (e connWaitError) Error() string { return e.err.Error() }
func (e connWaitError) Unwrap() error { return e.err }

// probe checks, on connections of the pool (closed afterwards):
//
//  1. version() is PostgreSQL, not CockroachDB (whose advisory-lock
//     functions are no-op stubs or transaction-scoped only);
//  2. hashtext and hashtextextended give what package hash gives, so
//     KeyText and KeyOf name the same locks as SQL calling them;
//  3. a connection keeps one server session: a session setting made on
//     connection A is still there on A's later statements, with the same
//     backend pid, and is not visible to connection B, which holds a
//     transaction open meanwhile so that a transaction pooler would have to
//     hand A another backend. PgBouncer in transaction mode fails this.
//
// Each of the checks on A is a round trip that waits for no lock, passed to
// observeRTT: so the Locker's first deadline-bound wait keeps back what a
// round trip costs (waitbound) before it has seen a hold of its own.
func probe(ctx context.Context, b backend, observeRTT func(time.Duration)) error {
	var tok [12]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])

	a, err := b.conn(ctx)
	if err != nil {
		return connWaitError{err}
	}
	defer a.destroy() // it carries the probe setting
	var version, set string
	var pid int32
	var h32 int32
	var h64 int64
	err = a.queryRow(ctx, time.Time{}, "SELECT pg_catalog.version(), pg_catalog.pg_backend_pid(), "+
		"pg_catalog.hashtext($1), pg_catalog.hashtextextended($1, 0), "+
		"pg_catalog.set_config('"+probeGUC+"', $2, false)",
		[]any{probeText, token}, &version, &pid, &h32, &h64, &set)
	if err != nil {
		return probeFailed(ctx, err)
	}
	if strings.Contains(version, "CockroachDB") {
		return unsupported("CockroachDB's session advisory-lock functions do not lock (%s)", version)
	}
	if want := hash.Text(probeText); h32 != want {
		return unsupported("server hashtext(%q) = %d, package hash gives %d: the server hashes differently", probeText, h32, want)
	}
	if want := hash.TextExtended(probeText, 0); h64 != want {
		return unsupported("server hashtextextended(%q, 0) = %d, package hash gives %d: the server hashes differently",
			probeText, h64, want)
	}
	sameSession := func() error {
		var p int32
		var t string
		sent := time.Now()
		err := a.queryRow(ctx, time.Time{}, "SELECT pg_catalog.pg_backend_pid(), "+
			"coalesce(pg_catalog.current_setting('"+probeGUC+"', true), '')", nil, &p, &t)
		if err != nil {
			return probeFailed(ctx, err)
		}
		observeRTT(time.Since(sent))
		if p != pid || t != token {
			return unsupported("the connection's server session changed between statements (backend pid %d, then %d): "+
				"a pooler in transaction or statement mode; "+poolerAdvice, pid, p)
		}
		return nil
	}
	if b.maxConns() == 1 {
		// No second connection to be had; check A alone.
		for range 3 {
			if err := sameSession(); err != nil {
				return err
			}
		}
		return nil
	}
	c, err := b.conn(ctx)
	if err != nil {
		return connWaitError{err}
	}
	defer c.destroy()
	for range 3 {
		if err := c.exec(ctx, time.Time{}, "BEGIN"); err != nil {
			return probeFailed(ctx, err)
		}
		var p int32
		var t string
		if err := c.queryRow(ctx, time.Time{}, "SELECT pg_catalog.pg_backend_pid(), "+
			"coalesce(pg_catalog.current_setting('"+probeGUC+"', true), '')", nil, &p, &t); err != nil {
			return probeFailed(ctx, err)
		}
		if p == pid || t == token {
			return unsupported("two connections share server backend pid %d: a pooler in transaction or statement mode; "+poolerAdvice, pid)
		}
		if err := sameSession(); err != nil {
			return err
		}
		if err := c.exec(ctx, time.Time{}, "ROLLBACK"); err != nil {
			return probeFailed(ctx, err)
		}
	}
	return nil
}
