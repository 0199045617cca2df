package pgerror_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/pgerror"
)

// sqlStateErr stands for another driver's error (lib/pq's *pq.Error has the
// same method).
type sqlStateErr string

func (e sqlStateErr) Error() string    { return "server says " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

type notSent struct{}

func (notSent) Error() string     { return "not sent" }
func (notSent) SafeToRetry() bool { return true }

func TestCodeReadsAnyDriversErrorInTheChain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: pgerror.SerializationFailure}, "40001"},
		{fmt.Errorf("tx: %w", &pgconn.PgError{Code: pgerror.DeadlockDetected}), "40P01"},
		{sqlStateErr(pgerror.LockNotAvailable), "55P03"},
		{errors.Join(errors.New("first"), sqlStateErr("23505")), "23505"},
		{errors.New("no code"), ""},
		{nil, ""},
	} {
		if got := pgerror.Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

type netErr struct{}

func (netErr) Error() string   { return "network down" }
func (netErr) Timeout() bool   { return false }
func (netErr) Temporary() bool { return false }

var _ net.Error = netErr{}

func TestConnectionLostTellsTheConnectionFromTheStatement(t *testing.T) {
	for _, tc := range []struct {
		err  error
		lost bool
	}{
		{nil, false},
		{&pgconn.PgError{Code: "57P01"}, true}, // admin_shutdown / pg_terminate_backend
		{sqlStateErr("08006"), true},           // connection_failure
		{sqlStateErr("53300"), true},           // too_many_connections
		{sqlStateErr("58000"), true},           // system_error
		{sqlStateErr(pgerror.QueryCanceled), false},
		{sqlStateErr(pgerror.LockNotAvailable), false},
		{sqlStateErr(pgerror.DeadlockDetected), false},
		{sqlStateErr("42883"), false},
		{driver.ErrBadConn, true},
		{sql.ErrConnDone, true},
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{netErr{}, true},
		{&pgconn.ConnectError{}, true},
		{notSent{}, true},
		{errors.New("syntax"), false},
		{context.Canceled, false},
	} {
		if got := pgerror.ConnectionLost(tc.err); got != tc.lost {
			t.Errorf("ConnectionLost(%v) = %v, want %v", tc.err, got, tc.lost)
		}
	}
}

// Which COMMIT errors leave the outcome unknown (the same table as txlock's
// TestCommitAmbiguous, whose copy of the check this one replaces).
func TestCommitAmbiguousOnlyWhenTheOutcomeIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		err       error
		ambiguous bool
	}{
		{&pgconn.PgError{Severity: "ERROR", Code: "40001"}, false},
		{&pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23505"}, false},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: "23503"}), false},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "XX000"}, true},
		{&pgconn.PgError{Severity: "PANIC", Code: "XX000"}, true},
		{pgx.ErrTxCommitRollback, false},
		{pgx.ErrTxClosed, false},
		{sql.ErrTxDone, false},
		{errors.New("pq: could not complete operation in a failed transaction"), false},
		{notSent{}, false},
		{sqlStateErr("40001"), false},
		{sqlStateErr("08006"), true},
		{sqlStateErr("57P01"), true},
		{context.Canceled, true},
		{context.DeadlineExceeded, true},
		{io.ErrUnexpectedEOF, true},
		{driver.ErrBadConn, true},
		{errors.New("conn closed"), true},
	} {
		if got := pgerror.CommitAmbiguous(tc.err); got != tc.ambiguous {
			t.Errorf("CommitAmbiguous(%v) = %v, want %v", tc.err, got, tc.ambiguous)
		}
	}
}

// PoolerPrepared names the cure of exactly the two prepared-statement
// codes, from any driver, once however often it is applied, and wraps the
// driver's error; every other error, and nil, is returned as it is.
func TestPoolerPreparedNamesTheCureOfPreparedStatementCodes(t *testing.T) {
	for _, code := range []string{pgerror.DuplicatePrepared, pgerror.InvalidStatementName} {
		for _, driverErr := range []error{&pgconn.PgError{Code: code}, sqlStateErr(code)} {
			err := pgerror.PoolerPrepared(fmt.Errorf("step: %w", driverErr))
			var pe *pgerror.PreparedStatementError
			if !errors.As(err, &pe) || !errors.Is(err, sqlock.ErrUnsupported) || !errors.Is(err, driverErr) ||
				pgerror.Code(err) != code || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
				t.Fatalf("%T %s: %v", driverErr, code, err)
			}
			if again := pgerror.PoolerPrepared(fmt.Errorf("outer: %w", err)); strings.Count(again.Error(), "default_query_exec_mode") != 1 {
				t.Fatalf("named twice: %v", again)
			}
		}
	}
	for _, err := range []error{nil, errors.New("plain"), sqlStateErr(pgerror.SerializationFailure), &pgconn.PgError{Code: pgerror.UniqueViolation}} {
		if got := pgerror.PoolerPrepared(err); got != err {
			t.Fatalf("PoolerPrepared(%v) = %v, want it unchanged", err, got)
		}
	}
}
