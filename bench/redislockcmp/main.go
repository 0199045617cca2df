// Command redislockcmp measures sqlock's redislock side by side with
// github.com/bsm/redislock and github.com/go-redsync/redsync/v4: 32
// goroutines contend for one lock, each taking it, leaving at once and
// releasing it, for a fixed time per library; it reports acquisitions per
// second and the 99th percentile of the wait, on one redis-server and (sqlock
// and redsync) on Redlock over 5. It is a module of its own so that the
// library does not depend on the libraries it is compared with; run it with
// `make bench-redis` at the repository's root.
//
// The comparison is kept fair: every library takes the lock with one
// attempt (sqlock's TryAcquire, bsm's Obtain without retries, redsync's
// TryLock) inside the same loop, which pauses a jittered -spin between
// attempts; every lock has the same TTL, far longer than a critical
// section, so that no library renews (sqlock's watchdog is armed, as it
// always is, and never fires); every library has its own clients of the
// same servers, configured alike. The libraries run in turn, -rounds
// times, the order rotating each round, and the table gives the median
// and the spread over the rounds, and each library's figure over sqlock's
// from the same round. An attempt or a release that fails (a timeout on
// a starved machine, no majority) is counted in the errors column and
// treated as a refusal.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock/internal/testing/redistest"
	"github.com/sqlock/sqlock/redislock"
)

var (
	contenders = flag.Int("contenders", 32, "goroutines contending for the lock")
	duration   = flag.Duration("duration", 2*time.Second, "time each library runs per round")
	rounds     = flag.Int("rounds", 3, "rounds (each runs every library once)")
	ttl        = flag.Duration("ttl", 2*time.Second, "every lock's TTL")
	spin       = flag.Duration("spin", time.Millisecond, "mean pause between a contender's attempts (jittered ±50%)")
)

// attempt is one try at the lock: a release func if it was granted, nil if
// someone else holds it.
type attempt func(ctx context.Context, key string) (release func(context.Context) error, err error)

type lib struct {
	name string
	try  attempt
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "redislockcmp:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	var servers []*redistest.Server
	for range 5 {
		s, err := redistest.Start(ctx, redistest.Options{})
		if err != nil {
			return err
		}
		defer s.Close()
		servers = append(servers, s)
	}
	// Every library gets clients of its own, configured alike (as
	// NewRedlock's doc recommends, with a pool for every contender).
	newClients := func(n int) []redis.UniversalClient {
		cs := make([]redis.UniversalClient, n)
		for i := range cs {
			cs[i] = redis.NewClient(&redis.Options{
				Addr: servers[i].Addr, PoolSize: *contenders, MinIdleConns: *contenders,
				ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1,
			})
		}
		return cs
	}
	single := []lib{
		{"sqlock redislock", sqlockSingle(newClients(1)[0])},
		{"bsm/redislock", bsmSingle(newClients(1)[0])},
		{"go-redsync/redsync", redsyncLock(newClients(1))},
	}
	redlock := []lib{
		{"sqlock redislock", sqlockRedlock(newClients(5))},
		{"go-redsync/redsync", redsyncLock(newClients(5))},
	}
	fmt.Println(machine())
	fmt.Printf("\n%d contenders, TTL %v, one attempt per try, %v jittered pause between tries, %v per library per round, %d rounds (medians; spread in brackets):\n\n",
		*contenders, *ttl, *spin, *duration, *rounds)
	fmt.Println("| servers | library | acquisitions/s | × sqlock's | p99 wait | × sqlock's | overlaps | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, set := range []struct {
		servers string
		libs    []lib
	}{{"1", single}, {"Redlock, 5", redlock}} {
		if err := compare(ctx, set.servers, set.libs); err != nil {
			return err
		}
	}
	fmt.Printf("\nload average after: %s\n", loadavg())
	return nil
}

// result is one library's run.
type result struct {
	rate     float64       // acquisitions per second
	p99      time.Duration // of the waits
	overlaps int64
	errs     int64 // attempts and releases that failed (a timeout, no majority)
}

// compare runs libs in turn, rounds times, and prints a row for each.
func compare(ctx context.Context, servers string, libs []lib) error {
	res := make([][]result, len(libs)) // [lib][round]
	for round := range *rounds {
		for j := range libs {
			i := (round + j) % len(libs)
			r, err := contend(ctx, libs[i].try, fmt.Sprintf("cmp-%d-%d", round, i))
			if err != nil {
				return fmt.Errorf("%s, %s servers: %w", libs[i].name, servers, err)
			}
			res[i] = append(res[i], r)
		}
	}
	for i, l := range libs {
		var rates, p99s, rateRatio, p99Ratio []float64
		var overlaps, errs int64
		for round, r := range res[i] {
			rates = append(rates, r.rate)
			p99s = append(p99s, float64(r.p99))
			rateRatio = append(rateRatio, r.rate/res[0][round].rate)
			p99Ratio = append(p99Ratio, float64(r.p99)/float64(res[0][round].p99))
			overlaps += r.overlaps
			errs += r.errs
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d | %d |\n", servers, l.name,
			spread(rates, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			spread(rateRatio, ratio),
			spread(p99s, func(v float64) string { return time.Duration(v).Round(10 * time.Microsecond).String() }),
			spread(p99Ratio, ratio),
			overlaps, errs)
	}
	return nil
}

func ratio(v float64) string { return fmt.Sprintf("%.2f", v) }

// spread is "median [min–max]".
func spread(vs []float64, format func(float64) string) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	return fmt.Sprintf("%s [%s–%s]", format(s[len(s)/2]), format(s[0]), format(s[len(s)-1]))
}

// contend runs the contenders on key for the duration and measures every
// acquisition's wait, from a contender's first attempt to the grant.
func contend(ctx context.Context, try attempt, key string) (result, error) {
	var (
		inside   atomic.Int32
		overlaps atomic.Int64
		errs     atomic.Int64
		stop     atomic.Bool
		mu       sync.Mutex
		waits    []time.Duration
		wg       sync.WaitGroup
	)
	var lastErr atomic.Pointer[error]
	start := time.Now()
	for range *contenders {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			for !stop.Load() {
				t0 := time.Now()
				var release func(context.Context) error
				for !stop.Load() {
					var err error
					if release, err = try(ctx, key); err != nil {
						errs.Add(1) // counted as a refusal: tried again after the pause
						lastErr.Store(&err)
					}
					if release != nil {
						break
					}
					time.Sleep(*spin/2 + rand.N(*spin+1))
				}
				if release == nil {
					return
				}
				mine = append(mine, time.Since(t0))
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := release(ctx); err != nil {
					errs.Add(1)
					lastErr.Store(&err)
				}
			}
		})
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if len(waits) == 0 {
		err := errors.New("no acquisitions")
		if e := lastErr.Load(); e != nil {
			err = fmt.Errorf("%w; last error: %w", err, *e)
		}
		return result{}, err
	}
	slices.Sort(waits)
	return result{
		rate:     float64(len(waits)) / elapsed.Seconds(),
		p99:      waits[len(waits)*99/100],
		overlaps: overlaps.Load(),
		errs:     errs.Load(),
	}, nil
}

func sqlockSingle(c redis.UniversalClient) attempt {
	lk := redislock.New(c)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := lk.TryAcquire(ctx, key, *ttl)
		if errors.Is(err, redislock.ErrNotAcquired) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

func sqlockRedlock(cs []redis.UniversalClient) attempt {
	r := redislock.NewRedlock(cs)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := r.TryAcquire(ctx, key, *ttl)
		if errors.Is(err, redislock.ErrNotAcquired) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

func bsmSingle(c redis.UniversalClient) attempt {
	client := bsm.New(c)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := client.Obtain(ctx, key, *ttl, nil) // nil options: no retry
		if errors.Is(err, bsm.ErrNotObtained) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

func redsyncLock(cs []redis.UniversalClient) attempt {
	pools := make([]redsyncpool.Pool, len(cs))
	for i, c := range cs {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(*ttl), redsync.WithTries(1))
		err := m.TryLockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock not confirmed")
			}
			return err
		}, nil
	}
}

// machine describes where the figures were measured.
func machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	version := "redis-server ?"
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	} else if out, err := exec.Command("/usr/bin/redis-server", "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Machine: %d CPUs (%s), GOMAXPROCS %d, %s, %s/%s; load average before: %s\n%s",
		runtime.NumCPU(), model, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadavg(), version)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
