// Package pgerror reads PostgreSQL errors the same way for every sqlock
// package: the SQLSTATE of an error from any driver, the codes sqlock acts
// on, whether an error means the connection (not the statement) failed, and
// whether a failed COMMIT may have committed.
package pgerror

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock"
)

// The SQLSTATE codes sqlock acts on.
const (
	SerializationFailure = "40001" // serialization_failure: retry the transaction
	DeadlockDetected     = "40P01" // deadlock_detected: this waiter was the victim
	LockNotAvailable     = "55P03" // lock_not_available: lock_timeout ran out
	QueryCanceled        = "57014" // query_canceled: a cancel request or statement_timeout
	InvalidTextRepr      = "22P02" // invalid_text_representation
	UniqueViolation      = "23505" // unique_violation
	ActiveSQLTransaction = "25001" // active_sql_transaction: a BEGIN stopped by a statement ahead of it (txbatch.StopBegin)
	InvalidStatementName = "26000" // invalid_sql_statement_name: a prepared statement vanished
	DuplicatePrepared    = "42P05" // duplicate_prepared_statement: a prepared statement's name is taken
	UndefinedFunction    = "42883" // undefined_function
)

// Code returns the SQLSTATE of the first error in err's chain that has a
// SQLState() string method (pgx's *pgconn.PgError, lib/pq's *pq.Error), or
// "" when there is none.
func Code(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// ConnectionLost reports whether err says the connection, not the SQL,
// failed: the network, a closed connection, the server shutting down or
// refusing connections. After such an error the session's state (and any
// lock it held) is unknown, or gone.
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	if code := Code(err); code != "" {
		switch code[:2] {
		case "08", "57", "53", "58": // connection, operator intervention, resources, system
			return code != QueryCanceled // not about the connection
		}
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// pqErrInFailedTransaction is the text of lib/pq's ErrInFailedTransaction,
// which its Commit returns, after rolling back, for a transaction a
// statement had already aborted (matched by text so that sqlock does not
// import a second driver).
const pqErrInFailedTransaction = "pq: could not complete operation in a failed transaction"

// CommitAmbiguous reports whether a COMMIT that returned err may have
// committed. The outcome is known when the server answered with an error
// (severity ERROR: PostgreSQL never reports ERROR for a transaction it
// committed), when COMMIT was never sent, or when the transaction had
// already ended or was aborted. Anything else — a broken connection, a
// context that ended while COMMIT was in flight, a FATAL that ended the
// session — is unknown.
func CommitAmbiguous(err error) bool {
	switch {
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.Is(err, pgx.ErrTxClosed),
		errors.Is(err, sql.ErrTxDone), err.Error() == pqErrInFailedTransaction:
		return false
	case pgconn.SafeToRetry(err): // nothing was sent
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		sev := pgErr.SeverityUnlocalized
		if sev == "" {
			sev = pgErr.Severity
		}
		return sev == "FATAL" || sev == "PANIC"
	}
	code := Code(err)
	// Other drivers: a SQLSTATE means the server answered, except for the
	// classes it sends when it ends the session.
	return code == "" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P")
}

// PreparedStatementError is a driver's 42P05 or 26000 for a prepared
// statement the client believed was, or was not, on its session: what
// PgBouncer in transaction mode without max_prepared_statements (every
// version before 1.21) causes with a driver that prepares statements, pgx's
// default query exec mode among them. (A DEALLOCATE ALL or DISCARD ALL run
// on the session gives the same 26000, once; its text names the pooler, the
// usual cause.) It matches sqlock.ErrUnsupported (the
// package cannot keep its promise over this pooler and driver setting), its
// text names the cure, and it wraps the driver's error.
type PreparedStatementError struct{ Err error }

func (e *PreparedStatementError) Error() string {
	return "sqlock: a prepared statement collided or vanished on the server (SQLSTATE " + Code(e.Err) + "): " +
		"a pooler in transaction mode that keeps no prepared statements (PgBouncer before 1.21, " +
		"or with max_prepared_statements = 0) moved the session's statements between server connections; " +
		"add default_query_exec_mode=exec to the DSN (pgx.QueryExecModeExec or QueryExecModeSimpleProtocol; " +
		"lib/pq: binary_parameters=yes): " + e.Err.Error()
}

// Is makes the error match sqlock.ErrUnsupported.
func (e *PreparedStatementError) Is(target error) bool { return target == sqlock.ErrUnsupported }

// Unwrap returns the driver's error.
func (e *PreparedStatementError) Unwrap() error { return e.Err }

// PoolerPrepared returns err, or, when err is a prepared statement's 42P05
// or 26000 (see PreparedStatementError) not yet explained, err wrapped in a
// *PreparedStatementError. Every package calls it where a database error
// leaves it, so that the trap is named the same way everywhere, once.
func PoolerPrepared(err error) error {
	switch Code(err) {
	case DuplicatePrepared, InvalidStatementName:
	default:
		return err
	}
	var pe *PreparedStatementError
	if errors.As(err, &pe) {
		return err
	}
	return &PreparedStatementError{Err: err}
}
