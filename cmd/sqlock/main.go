// Command sqlock shows who holds which sqlock lock, who waits, for how
// long, and who blocks whom, from pg_locks and pg_stat_activity, with the
// names behind advisory keys; and sqlock run runs a command while it holds
// a lock, the cluster-wide flock(1).
//
//	go install github.com/sqlock/sqlock/cmd/sqlock@latest
//
//	sqlock locks  [--dsn DSN] [--json] [--watch [--every 2s]] [--slow 1s] [--name NAME]...
//	sqlock key    NAME [--dsn DSN]
//	sqlock leases [--dsn DSN] [--json] [--table sqlock_leases]
//	sqlock run    --name NAME [--backend lease|advisory|redis] [--ttl 30s] [--wait 10s] [--grace 10s] -- COMMAND [ARG]...
//
// The database is --dsn or else $DATABASE_URL (a libpq URL or key=value
// string). Keys are named by the table advisory.WithKeyNames fills and by
// --name. Seeing other roles' sessions takes a superuser or a member of
// pg_read_all_stats.
//
// Exit codes: 0 done; 1 failed; 2 bad usage; 3 cannot connect; 4 the role
// lacks a privilege; 5 the server is not PostgreSQL (9.6 or later).
//
// sqlock run passes the command's exit code through, so its own are kept
// clear of the codes commands use: 121 the lock was not acquired (held,
// with --wait 0, or the wait ran out), 122 it was lost while the command
// ran (the command got SIGTERM, then SIGKILL after --grace), 125 sqlock
// run itself failed (bad usage, cannot connect), 126 and 127 the command
// cannot be run or was not found, as the shell reports them. The command
// finds the lock's name, backend and fencing token in SQLOCK_NAME,
// SQLOCK_BACKEND and SQLOCK_TOKEN, runs in a process group of its own, and
// gets the signals sent to sqlock run. sqlock run --help has the details.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/inspect"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitConnect     = 3
	exitPrivilege   = 4
	exitUnsupported = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, tty: isTTY(os.Stdout)}))
}

// env is the command's world, replaced in tests.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	tty            bool // color and in-place refresh
}

const usage = `usage:
  sqlock locks  [--dsn DSN] [--json] [--watch [--every 2s]] [--slow 1s] [--name NAME]...
  sqlock key    NAME [--dsn DSN]
  sqlock leases [--dsn DSN] [--json] [--table sqlock_leases]
  sqlock run    --name NAME [--backend lease|advisory|redis] [--ttl 30s] [--wait 10s]
                [--grace 10s] [--dsn DSN] [--redis ADDR] -- COMMAND [ARG]...

The database is --dsn, or else $DATABASE_URL.
Exit codes: 0 done, 1 failed, 2 bad usage, 3 cannot connect, 4 missing privilege, 5 not PostgreSQL.
sqlock run exits with COMMAND's code, or 121 not acquired, 122 lost, 125 failed,
126/127 COMMAND not runnable/not found (sqlock run --help).
`

func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var err error
	switch args[0] {
	case "locks":
		err = locksCmd(ctx, args[1:], e)
	case "key":
		err = keyCmd(ctx, args[1:], e)
	case "leases":
		err = leasesCmd(ctx, args[1:], e)
	case "run":
		return runUnderLock(ctx, args[1:], e) // exit codes of its own: the command's pass through
	default:
		err = usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	if err == nil || (errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return exitOK
	}
	fmt.Fprintln(e.stderr, "sqlock:", err)
	return exitCode(err)
}

func exitCode(err error) int {
	var u usageError
	var c connectError
	switch {
	case errors.As(err, &u), errors.Is(err, sqlock.ErrInvalidOption):
		return exitUsage
	case errors.As(err, &c):
		return exitConnect
	case errors.Is(err, inspect.ErrPrivilege):
		return exitPrivilege
	case errors.Is(err, sqlock.ErrUnsupported):
		return exitUnsupported
	}
	return exitFailed
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg + " (sqlock --help)" }

type connectError struct {
	where string
	err   error
}

func (c connectError) Error() string { return "cannot connect to " + c.where + ": " + c.err.Error() }
func (c connectError) Unwrap() error { return c.err }

// flags parses a subcommand's flags, which may come before or after its
// arguments, and returns the arguments.
func flags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{fs.Name() + ": " + err.Error()}
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// open connects to --dsn or $DATABASE_URL and checks the connection, so a
// wrong address is a connectError, told apart from what follows.
func open(ctx context.Context, dsn string, e env) (*sql.DB, error) {
	if dsn == "" {
		dsn = e.getenv("DATABASE_URL")
	}
	if dsn == "" {
		return nil, usageError{"no database: give --dsn or set DATABASE_URL"}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, usageError{"bad DSN: " + err.Error()}
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "sqlock"
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database) // never the password
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, connectError{where, err}
	}
	return db, nil
}

type nameList []string

func (n *nameList) String() string     { return strings.Join(*n, ",") }
func (n *nameList) Set(s string) error { *n = append(*n, s); return nil }
