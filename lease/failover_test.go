package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// grant is one acquisition a worker was told of: the interval in which
// its holder trusted it, from the moment Acquire returned to the first of
// its Release call and its local deadline.
type grant struct {
	name           string
	token          int64
	called, got    time.Time
	end            time.Time
	released       bool // Release confirmed by the server
	before, after  bool // granted surely by the old primary / surely by the new one
	enteredSection bool
}

// failoverOutcome is what one run of the failover workload saw.
type failoverOutcome struct {
	grants                []grant
	before, after         int // grants surely on the old / new primary
	tokenRepeats          int // a token handed to two acquisitions
	backwards             int // a grant on the new primary with a token ≤ one granted on the old, same name
	doubleGrants          int // two grants of a name trusted at the same time by their holders
	dbOverlaps, dbNotUp   int // the database saw two holders in a section / a token not above the last
	confirmed, lostWrites int // guarded writes whose commit returned, and those missing after the failover
	unknownWrites         int // guarded writes whose commit outcome is unknown (the connection died)
	lostReported          int // sections refused by the guard with ErrLost (reported, nothing written)
	survivor              string
	survivorLost          bool
	survivorMargin        time.Duration // its local deadline at the kill, less the time the new primary took writes
	failoverTook          time.Duration
	lagBytes              int64                 // the standby's lag sampled just before the kill
	history               []porcupine.Operation // the register's history (startHistory), across the failover
	historyUnknown        int                   // operations of unknown outcome in it
	errors                int                   // transient errors (connection refused, read-only, broken connection)
}

// failoverWorkload: 6 goroutines on two Managers (a pgxpool and a
// database/sql pool, both on the replica set's multi-host DSN) acquire one
// of two leases, enter a guarded section (a guarded transaction marks the
// name's row held by them, only if its last token is smaller than
// theirs), work briefly, leave it (a guarded transaction clears the mark,
// only if it is still theirs, and logs the write), and release — in a
// loop. After at least 40 grants the primary is stopped hard (SIGQUIT)
// and the standby promoted; the pools reconnect by themselves (target_session_attrs=read-write); the
// run goes on until 40 grants more. A survivor lease with a long TTL is
// held across the failover, renewing. The clients of startHistory run
// beside them, 20 rounds before the failover and 20 after.
func failoverWorkload(t *testing.T, r *pgtest.ReplicaSet) failoverOutcome {
	db := r.NewDB(t)
	ctx := context.Background()
	if err := lease.Migrate(ctx, db.Pool()); err != nil {
		t.Fatal(err)
	}
	db.Exec(`CREATE TABLE excl (k text PRIMARY KEY, holder text, last_token bigint NOT NULL DEFAULT 0, n bigint NOT NULL DEFAULT 0);
		CREATE TABLE done (k text, token bigint PRIMARY KEY);
		INSERT INTO excl (k) VALUES ('f0'), ('f1')`)
	if err := r.WaitReplay(ctx); err != nil {
		t.Fatal(err)
	}
	h := startHistory(t, db) // its clients run beside the workers, on a lease of their own
	ttl := max(500*time.Millisecond, 50*db.Latency())
	pool := openPool(t, db.DSN)
	managers := []*lease.Manager{lease.New(pool), lease.New(openSQL(t, "pgx", db.DSN))}

	var out failoverOutcome
	survivorTTL := max(5*time.Second, 10*ttl)
	survivor, err := managers[0].Acquire(ctx, "survivor", survivorTTL)
	if err != nil {
		t.Fatal(err)
	}
	out.survivor = "held"

	var (
		mu                sync.Mutex
		killStart, killed time.Time // killed: the old primary is gone and the new one takes writes
		phase             atomic.Int32
		nBefore, nAfter   atomic.Int32
		stop              = make(chan struct{})
		wg                sync.WaitGroup
		confirmed         = map[int64]bool{}
	)
	guarded := func(l *lease.Lease, q string, args ...any) (rows int64, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := l.Guard(ctx, tx); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, q, args...)
			rows = tag.RowsAffected()
			return err
		})
		return rows, err
	}
	const workers = 6
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := managers[w%2]
			me := "w" + strconv.Itoa(w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				name := "f" + strconv.Itoa(rand.IntN(2))
				g := grant{name: name, called: time.Now()}
				calledPhase := phase.Load()
				l, err := m.Acquire(ctx, name, ttl)
				if err != nil {
					mu.Lock()
					out.errors++
					mu.Unlock()
					time.Sleep(5 * time.Millisecond) // a retry's pause while there is no primary
					continue
				}
				g.token, g.got = l.Token(), time.Now()
				g.before = phase.Load() == 0
				g.after = calledPhase == 2
				if g.before {
					nBefore.Add(1)
				} else if g.after {
					nAfter.Add(1)
				}
				rows, err := guarded(l, `UPDATE excl SET holder = $1, last_token = $2 WHERE k = $3 AND last_token < $2`, me, l.Token(), name)
				var wrote, unknown bool
				switch {
				case errors.Is(err, lease.ErrLost):
				case err != nil:
				case rows != 1:
					mu.Lock()
					out.dbNotUp++
					mu.Unlock()
				default:
					g.enteredSection = true
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the work
					rows, err = guarded(l, `WITH x AS (UPDATE excl SET holder = NULL, n = n + 1 WHERE k = $1 AND holder = $2 AND last_token = $3 RETURNING k)
						INSERT INTO done SELECT k, $3 FROM x`, name, me, l.Token())
					switch {
					case errors.Is(err, lease.ErrLost):
					case err != nil:
						unknown = true // the commit may or may not have happened
					case rows != 1:
						mu.Lock()
						out.dbOverlaps++
						mu.Unlock()
					default:
						wrote = true
					}
				}
				g.end = time.Now()
				rerr := l.Release(ctx)
				g.released = rerr == nil
				if d := l.Deadline(); d.Before(g.end) {
					g.end = d
				}
				mu.Lock()
				if errors.Is(err, lease.ErrLost) {
					out.lostReported++
				} else if err != nil {
					out.errors++
				}
				if wrote {
					out.confirmed++
					confirmed[g.token] = true
				}
				if unknown {
					out.unknownWrites++
				}
				out.grants = append(out.grants, g)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "40 grants before the failover", func() bool { return nBefore.Load() >= 40 })
	h.waitRounds(t, 20)
	lag, err := r.Lag(ctx)
	if err != nil {
		t.Log(err)
	}
	out.lagBytes = lag
	mu.Lock()
	killStart = time.Now()
	mu.Unlock()
	survivorDeadline := survivor.Deadline()
	phase.Store(1)
	if err := r.Failover(ctx); err != nil {
		close(stop)
		wg.Wait()
		h.finish()
		t.Fatal(err)
	}
	killed = time.Now()
	phase.Store(2)
	waitFor(t, "40 grants after the failover", func() bool { return nAfter.Load() >= 40 })
	h.waitRounds(t, 20)
	close(stop)
	wg.Wait()
	out.history, out.historyUnknown = h.finish()
	out.failoverTook = killed.Sub(killStart)

	// The survivor renews on the new primary if its TTL outlasted the
	// failover: a renewal sent after the promotion moves its deadline past
	// killed + TTL − TTL/10.
	out.survivorMargin = survivorDeadline.Sub(killed)
	waitFor(t, "the survivor renewed on the new primary, or lost", func() bool {
		return survivor.Deadline().After(killed.Add(survivorTTL-survivorTTL/10)) || survivor.Err() != nil
	})
	if survivor.Err() != nil {
		out.survivorLost = true
		out.survivor = "lost: " + survivor.Err().Error()
	} else if rows, err := guarded(survivor, `UPDATE excl SET n = n WHERE k = 'f0'`); err != nil || rows != 1 {
		out.survivor = fmt.Sprintf("guarded write after the failover: %d rows, %v", rows, err)
	} else {
		out.survivor = "renewed on the new primary, guarded write committed"
	}
	if err := survivor.Release(ctx); err != nil && out.survivor[:4] == "rene" {
		out.survivor += "; release: " + err.Error()
	}

	// Tokens: unique, and on the new primary above every one of the old.
	seen := map[int64]int{}
	maxBefore := map[string]int64{}
	for _, g := range out.grants {
		seen[g.token]++
		if g.before {
			out.before++
			maxBefore[g.name] = max(maxBefore[g.name], g.token)
		}
	}
	for _, n := range seen {
		if n > 1 {
			out.tokenRepeats += n - 1
		}
	}
	for _, g := range out.grants {
		if g.after {
			out.after++
			if g.token <= maxBefore[g.name] {
				out.backwards++
			}
		}
	}
	// Two holders of a name trusting their leases at once: the later grant
	// returned before the earlier holder stopped trusting its own.
	byName := map[string][]grant{}
	for _, g := range out.grants {
		byName[g.name] = append(byName[g.name], g)
	}
	for _, gs := range byName {
		sort.Slice(gs, func(i, j int) bool { return gs[i].got.Before(gs[j].got) })
		for i := range gs {
			for j := i + 1; j < len(gs) && gs[j].got.Before(gs[i].end); j++ {
				out.doubleGrants++
			}
		}
	}
	// Writes whose commit returned are on the new primary.
	rows, err := admin(t, db).Query(ctx, `SELECT token FROM done`)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	have := map[int64]bool{}
	for _, tok := range tokens {
		have[tok] = true
	}
	for tok := range confirmed {
		if !have[tok] {
			out.lostWrites++
		}
	}
	return out
}

func (o failoverOutcome) String() string {
	return fmt.Sprintf("standby %d bytes behind at the kill; failover in %v; %d grants (%d surely before, %d surely after); token repeats %d, tokens not above the old primary's %d, "+
		"leases granted twice %d; database: overlaps %d, tokens not increasing %d; guarded writes confirmed %d, lost %d, unknown outcome %d; "+
		"refused by the guard (reported) %d; transient errors %d; survivor: %s",
		o.lagBytes, o.failoverTook.Round(time.Millisecond), len(o.grants), o.before, o.after, o.tokenRepeats, o.backwards,
		o.doubleGrants, o.dbOverlaps, o.dbNotUp, o.confirmed, o.lostWrites, o.unknownWrites, o.lostReported, o.errors, o.survivor)
}

// TestFailoverWithSynchronousReplicationGrantsNoLeaseTwice: leases taken
// and guarded writes made in a loop while the primary is stopped hard and
// its synchronous standby promoted. No lease is granted twice (no two
// holders trust a lease at once, no two sections overlap in the database),
// tokens stay unique and increase across the failover, no guarded write
// whose commit returned is lost, and a lease held across the failover with
// a TTL longer than it renews on the new primary. A history of acquire,
// guarded fenced write, read and release recorded by other clients across
// the same failover (startHistory; operations cut off by it of unknown
// outcome) is linearizable against a lock guarding a fenced register.
func TestFailoverWithSynchronousReplicationGrantsNoLeaseTwice(t *testing.T) {
	leakCheck(t)
	r := pgtest.NewReplicaSet(t, pgtest.ReplicaOptions{Synchronous: true})
	o := failoverWorkload(t, r)
	t.Log(o)
	if o.tokenRepeats != 0 || o.backwards != 0 || o.doubleGrants != 0 || o.dbOverlaps != 0 || o.dbNotUp != 0 || o.lostWrites != 0 {
		t.Fatalf("synchronous replication: %v", o)
	}
	if o.before < 40 || o.after < 40 || o.confirmed == 0 {
		t.Fatalf("the workload did not run on both sides of the failover: %v", o)
	}
	// Held across the failover, the survivor either renews on the new
	// primary and its guarded write commits, or (its deadline came before a
	// renewal got through) is lost, and says so; nothing else. Which of the
	// two depends on how fast the machine was, so either passes.
	switch {
	case o.survivorLost:
		t.Logf("the survivor's deadline was %v after the promotion: %s", o.survivorMargin.Round(time.Millisecond), o.survivor)
	case o.survivor != "renewed on the new primary, guarded write committed":
		t.Fatalf("the lease held across the failover, with %v left after the promotion: %s", o.survivorMargin.Round(time.Millisecond), o.survivor)
	}
	// Operations of unknown outcome stay open to the end of the history,
	// which makes the search long: beside two CPU hogs a minute was not
	// enough for 11,014 operations (3 unknown) and the answer was Unknown.
	// The limit only bounds a slow machine; Unknown still fails.
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(faultModel(), o.history, 4*time.Minute)
	if res != porcupine.Ok {
		if res == porcupine.Illegal {
			t.Log(describeHistory(info))
		}
		t.Fatalf("history of %d operations (%d of unknown outcome) across the failover: %v after %v",
			len(o.history), o.historyUnknown, res, time.Since(checkStart).Round(time.Millisecond))
	}
	t.Logf("history of %d operations (%d of unknown outcome) across the failover: linearizable (checked in %v)",
		len(o.history), o.historyUnknown, time.Since(checkStart).Round(time.Millisecond))
}

// TestFailoverWithAsynchronousReplicationMeasuresTheWindow runs the same
// workload on an asynchronous standby and reports what the failover cost:
// token repeats, tokens not above the old primary's, leases granted twice,
// confirmed guarded writes lost; and whether the history recorded across
// the failover was linearizable. Asynchronous replication promises none of this, and
// what happens depends on the standby's lag at the kill, so the test
// asserts only that the workload ran on both sides of the failover and
// logs the rest; LEASE_FAILOVER_RUNS repeats it (docs/lease.md has the
// figures).
func TestFailoverWithAsynchronousReplicationMeasuresTheWindow(t *testing.T) {
	leakCheck(t)
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("LEASE_FAILOVER_RUNS")); err == nil && v > 0 {
		runs = v
	}
	var total failoverOutcome
	affected, illegal := 0, 0
	for i := range runs {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			r := pgtest.NewReplicaSet(t, pgtest.ReplicaOptions{})
			o := failoverWorkload(t, r)
			t.Log(o)
			if o.before < 40 || o.after < 40 {
				t.Fatalf("the workload did not run on both sides of the failover: %v", o)
			}
			if o.tokenRepeats+o.backwards+o.doubleGrants+o.dbOverlaps+o.dbNotUp+o.lostWrites > 0 {
				affected++
			}
			total.tokenRepeats += o.tokenRepeats
			total.backwards += o.backwards
			total.doubleGrants += o.doubleGrants
			total.dbOverlaps += o.dbOverlaps
			total.dbNotUp += o.dbNotUp
			total.lostWrites += o.lostWrites
			total.confirmed += o.confirmed
			res := porcupine.CheckOperationsTimeout(faultModel(), o.history, 60*time.Second)
			if res == porcupine.Illegal {
				illegal++
			}
			t.Logf("history across the failover: %d operations (%d of unknown outcome): %v", len(o.history), o.historyUnknown, res)
		})
	}
	t.Logf("asynchronous replication, %d runs: %d workloads with an anomaly (in all: token repeats %d, tokens not above the old primary's %d, "+
		"leases granted twice %d, database overlaps %d, tokens not increasing in the database %d, confirmed guarded writes lost %d of %d); "+
		"%d histories not linearizable",
		runs, affected, total.tokenRepeats, total.backwards, total.doubleGrants, total.dbOverlaps, total.dbNotUp, total.lostWrites, total.confirmed, illegal)
}
