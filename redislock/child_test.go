package redislock_test

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

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/exclusiontest"
	"github.com/sqlock/sqlock/redislock"
	"github.com/sqlock/sqlock/versioned"
)

// Worker processes: the test binary run again with childEnv set to a role.
// They report on stdout, one "RESULT …" line at the end.

func runChild(role string) int {
	switch role {
	case "exclusion":
		return exclusionChild()
	case "paused":
		return pausedChild()
	case "exclusion-all":
		return exclusionAllChild()
	}
	fmt.Println("unknown role", role)
	return 2
}

// childAcquirer opens clients of REDIS_ADDRS (comma-separated): one server
// is a Locker, several a Redlock.
func childAcquirer() (sqlock.Acquirer, func(), error) {
	addrs := strings.Split(os.Getenv("REDIS_ADDRS"), ",")
	ttl, err := time.ParseDuration(os.Getenv("REDIS_TTL"))
	if err != nil {
		return nil, nil, err
	}
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	}
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	if len(cs) == 1 {
		return redislock.New(cs[0], redislock.WithTimeout(time.Minute)).Acquirer(ttl), closeAll, nil
	}
	return redislock.NewRedlock(cs, redislock.WithTimeout(time.Minute)).Acquirer(ttl), closeAll, nil
}

// exclusionChild runs the sections of exclusiontest on the locks of
// childAcquirer; a fenced lock's section checks its token against the last
// holder's.
func exclusionChild() int {
	locks, closeAll, err := childAcquirer()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer closeAll()
	db, err := sql.Open("pgx", os.Getenv("REDIS_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer db.Close()
	db.SetMaxIdleConns(16)
	return exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		exec := func(q string, args ...any) (int64, error) {
			r, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			return r.RowsAffected()
		}
		l, err := locks.Acquire(ctx, "excl:"+strconv.Itoa(k))
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		const work = 500 * time.Microsecond
		var o exclusiontest.Outcome
		if f, ok := l.(interface {
			sqlock.Fenced
			Deadline() time.Time
		}); ok {
			o = exclusiontest.FencedSection(
				func() (int64, error) { return exec(exclusiontest.EnterFenced, me, f.Token(), k) },
				func() (int64, error) { return exec(exclusiontest.LeaveFenced, k, me, f.Token()) },
				work, f.Deadline)
		} else {
			o.Err = exclusiontest.Section(
				func() (int64, error) { return exec(exclusiontest.Enter, me, k) },
				func() (int64, error) { return exec(exclusiontest.Leave, k, me) }, work)
		}
		err = o.Err
		// Lost under load — and reported. Only an overlap or an unreported
		// loss breaks the promise.
		o.Lost = o.Lost || l.Err() != nil
		rerr := l.Release(ctx)
		if errors.Is(rerr, redislock.ErrNotHeld) && l.Err() != nil {
			rerr = nil
		}
		if err == nil {
			o.Err = rerr
		}
		return o
	})
}

// pausedChild acquires REDIS_NAME on the one server of REDIS_ADDRS, says
// "ACQUIRED <token>", and waits for a line on stdin (the parent stops it
// with SIGSTOP before sending it, and continues it after). Then, as a
// holder that slept through its TTL would, it writes the register with a
// fenced versioned update made with the lock's Context. It reports whether
// Lost had fired before it tried, what the write did, and what Release
// said.
func pausedChild() int {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDRS")})
	defer c.Close()
	ttl, _ := time.ParseDuration(os.Getenv("REDIS_TTL"))
	ctx := context.Background()
	l, err := redislock.New(c).Acquire(ctx, os.Getenv("REDIS_NAME"), ttl)
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
	db, err := sql.Open("pgx", os.Getenv("REDIS_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer db.Close()
	write := "nil"
	if err := fencedWrite(ctx, db, "paused holder", l.Token()); errors.Is(err, versioned.ErrFenced) {
		write = "ErrFenced"
	} else if err != nil {
		write = strconv.Quote(err.Error())
	}
	relErr := l.Release(ctx)
	fmt.Printf("RESULT lost=%t write=%s release=%t\n", lost, write, errors.Is(relErr, redislock.ErrNotHeld))
	return 0
}

// register is the row the paused-holder test writes: a versioned, fenced
// register.
var register = versioned.MustTable("register")

// fencedWrite reads the register's version and writes value with token
// as its fence: refused with versioned.ErrFenced once a larger token has
// written.
func fencedWrite(ctx context.Context, db *sql.DB, value string, token int64) error {
	var version int64
	if err := db.QueryRowContext(ctx, `SELECT version FROM register WHERE id = 1`).Scan(&version); err != nil {
		return err
	}
	_, err := versioned.Update(ctx, db, register, 1, version, versioned.Set("value", value), versioned.Fence("fence", token))
	return err
}

// exclusionAllChild runs the sections of exclusiontest, each under
// AcquireAll of its name and the next one (k and k+1 of the names, so that
// every two neighbours contend, in either order): a section is fenced by
// its own name's token. A Locker on the one server of REDIS_ADDRS.
func exclusionAllChild() int {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDRS"), PoolSize: 16})
	defer c.Close()
	ttl, err := time.ParseDuration(os.Getenv("REDIS_TTL"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	keys, _ := strconv.Atoi(os.Getenv("REDIS_KEYS"))
	locks := redislock.New(c, redislock.WithTimeout(time.Minute))
	db, err := sql.Open("pgx", os.Getenv("REDIS_DSN"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer db.Close()
	db.SetMaxIdleConns(16)
	return exclusiontest.Child(func(ctx context.Context, me string, k int) exclusiontest.Outcome {
		exec := func(q string, args ...any) (int64, error) {
			r, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			return r.RowsAffected()
		}
		name := "excl:" + strconv.Itoa(k)
		// The neighbour first: AcquireAll sorts them.
		l, err := locks.AcquireAll(ctx, []string{"excl:" + strconv.Itoa((k+1)%keys), name}, ttl)
		if err != nil {
			return exclusiontest.Outcome{Err: err}
		}
		token, _ := l.Token(name)
		o := exclusiontest.FencedSection(
			func() (int64, error) { return exec(exclusiontest.EnterFenced, me, token, k) },
			func() (int64, error) { return exec(exclusiontest.LeaveFenced, k, me, token) },
			500*time.Microsecond, l.Deadline)
		o.Lost = o.Lost || l.Err() != nil
		rerr := l.Release(ctx)
		// Past its deadline the keys may be gone before the loss's timer
		// has run on a loaded machine: a loss, not an error.
		if errors.Is(rerr, redislock.ErrNotHeld) && (l.Err() != nil || time.Now().After(l.Deadline())) {
			o.Lost, rerr = true, nil
		}
		if o.Err == nil {
			o.Err = rerr
		}
		return o
	})
}
