package etcdlock_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlock/sqlock/etcdlock"
	"github.com/sqlock/sqlock/etcdlock/internal/etcdtest"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/versioned"
)

// Worker processes: the test binary run again with childEnv set to a role,
// on the cluster of ETCD_CHILD_ENDPOINTS. They report on stdout.

func runChild(role string) int {
	cl, err := clientv3.New(etcdtest.Config(strings.Split(os.Getenv("ETCD_CHILD_ENDPOINTS"), ",")...))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer cl.Close()
	db, err := sql.Open("pgx", os.Getenv("ETCD_CHILD_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer db.Close()
	ttl, err := time.ParseDuration(os.Getenv("ETCD_CHILD_TTL"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	switch role {
	case "exclusion":
		return exclusionChild(cl, db, ttl)
	case "paused":
		return pausedChild(cl, db, ttl)
	}
	fmt.Println("unknown role", role)
	return 2
}

// exclusionChild runs the fenced sections of exclusiontest: each holder's
// token must exceed the one before it.
func exclusionChild(cl *clientv3.Client, db *sql.DB, ttl time.Duration) int {
	db.SetMaxIdleConns(16)
	lk := etcdlock.New(cl, etcdlock.WithTimeout(5*time.Minute))
	return exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		exec := func(q string, args ...any) (int64, error) {
			r, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			return r.RowsAffected()
		}
		l, err := lk.Acquire(ctx, "excl:"+strconv.Itoa(k), ttl)
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		o := exclusiontest.FencedSection(
			func() (int64, error) { return exec(exclusiontest.EnterFenced, me, l.Token(), k) },
			func() (int64, error) { return exec(exclusiontest.LeaveFenced, k, me, l.Token()) },
			500*time.Microsecond, l.Deadline)
		err = o.Err
		o.Lost = o.Lost || l.Err() != nil
		rerr := l.Release(ctx)
		if errors.Is(rerr, etcdlock.ErrNotHeld) && l.Err() != nil {
			rerr = nil
		}
		if err == nil {
			o.Err = rerr
		}
		return o
	})
}

// pausedChild acquires ETCD_CHILD_NAME, says "ACQUIRED <token>", and waits
// for a line on stdin (the parent stops it with SIGSTOP before sending it,
// and continues it after). Then, as a holder that slept through its TTL
// would, it writes the register with a fenced versioned update made with
// the lock's Context. It reports whether Lost had fired before it tried,
// what the write did, and what Release said.
func pausedChild(cl *clientv3.Client, db *sql.DB, ttl time.Duration) int {
	ctx := context.Background()
	l, err := etcdlock.New(cl).Acquire(ctx, os.Getenv("ETCD_CHILD_NAME"), ttl)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Printf("ACQUIRED %d\n", l.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	lost := false
	select {
	case <-l.Lost():
		lost = true
	default:
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	write := "nil"
	// The lock's context has ended (lost); the write runs on one that has
	// not, carrying the same token, as a holder that ignored Lost would.
	wctx := context.WithoutCancel(lctx)
	if err := fencedWrite(wctx, db, "paused holder"); errors.Is(err, versioned.ErrFenced) {
		write = "ErrFenced"
	} else if err != nil {
		write = strconv.Quote(err.Error())
	}
	relErr := l.Release(ctx)
	fmt.Printf("RESULT lost=%t write=%s release=%t\n", lost, write, errors.Is(relErr, etcdlock.ErrNotHeld))
	return 0
}

// register is the table the paused-holder test writes: one versioned row
// whose lock:"fence" column refuses a token smaller than the last writer's.
var register = versioned.MustTable("register")

// Register is the register's row.
type Register struct {
	ID      int64
	Value   string
	Version int64 `lock:"version"`
	Fence   int64 `lock:"fence"`
}

// registerDDL creates the register's table with its one row.
const registerDDL = `CREATE TABLE register (id bigint PRIMARY KEY, value text, version bigint NOT NULL, fence bigint);
INSERT INTO register VALUES (1, '', 1, NULL)`

// fencedWrite reads the register's version and writes value with the
// fencing token ctx carries (sqlock.WithFencingToken, as a Lock's Context
// sets it): refused with versioned.ErrFenced once a larger token has
// written.
func fencedWrite(ctx context.Context, db *sql.DB, value string) error {
	var version int64
	if err := db.QueryRowContext(ctx, `SELECT version FROM register WHERE id = 1`).Scan(&version); err != nil {
		return err
	}
	r := Register{ID: 1, Value: value, Version: version}
	return versioned.UpdateStruct(ctx, db, register, &r, versioned.Set("value", value))
}
