package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// provider is a real HTTP server standing in for a payment provider: it
// counts every call per path and the distinct idempotency keys it was
// sent per path, and answers with the call's serial number.
type provider struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
	keys  map[string]map[string]bool
	n     int
}

func newProvider(t *testing.T) *provider {
	p := &provider{calls: map[string]int{}, keys: map[string]map[string]bool{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.n++
		p.calls[r.URL.Path]++
		if p.keys[r.URL.Path] == nil {
			p.keys[r.URL.Path] = map[string]bool{}
		}
		p.keys[r.URL.Path][r.Header.Get("Idempotency-Key")] = true
		fmt.Fprintf(w, "%s#%d", r.URL.Path, p.n)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) count(path string) (calls, keys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[path], len(p.keys[path])
}

var phaseNames = []string{"reserve", "charge", "capture"}

// providerPhases calls the provider once per phase, forwarding the key;
// hook, if set, runs before (at "name") and after ("after:name") each
// call.
func providerPhases(url string, hook func(at string)) []idem.Phase {
	var phases []idem.Phase
	for _, name := range phaseNames {
		phases = append(phases, idem.Phase{Name: name, Run: func(ctx context.Context, forward string, done [][]byte) ([]byte, error) {
			if hook != nil {
				hook(name)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/"+name, nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Idempotency-Key", forward)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			if hook != nil {
				hook("after:" + name)
			}
			return b, err
		}})
	}
	return phases
}

func newPhasedDB(t *testing.T) (*pgtest.DB, *lease.Manager) {
	db := newDB(t)
	if err := lease.Migrate(context.Background(), db.Pool()); err != nil {
		t.Fatal(err)
	}
	return db, lease.New(db.Pool(), lease.WithTimeout(time.Minute))
}

// phasedChild runs the provider phases for IDEM_KEY with a short lease
// (IDEM_LEASE_TTL, 1 s unless set), printing "AT <point>" and blocking (to be killed) at IDEM_KILL_AT.
func phasedChild(ctx context.Context, pool *pgxpool.Pool) int {
	if err := lease.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return 2
	}
	leases := lease.New(pool)
	phases := providerPhases(os.Getenv("IDEM_STUB"), func(at string) {
		if at == os.Getenv("IDEM_KILL_AT") {
			fmt.Println("AT " + at)
			select {}
		}
	})
	ttl := time.Second
	if v := os.Getenv("IDEM_LEASE_TTL"); v != "" {
		var err error
		if ttl, err = time.ParseDuration(v); err != nil {
			fmt.Println(err)
			return 2
		}
	}
	_, err := idem.RunPhases(ctx, pool, leases, "", os.Getenv("IDEM_KEY"), []byte("fp"), phases, idem.WithLeaseTTL(ttl))
	fmt.Println("error: finished without being killed:", err)
	return 2
}

// TestPhasesResumeAfterKill: a process killed with SIGKILL between two
// phases (before the second one's call) or inside one (after its call,
// before its record): the retry waits for the dead attempt's lease to
// expire, then resumes at the first unrecorded phase. A recorded phase is
// never called again (the provider stub counts); a phase cut short after
// its call is called again with the same forwarded key, which the provider
// can deduplicate on; a later call replays without calling anything.
func TestPhasesResumeAfterKill(t *testing.T) {
	leakCheck(t)
	for _, c := range []struct {
		killAt                    string
		wantChargeCalls, wantKeys int
	}{
		{"charge", 1, 1},       // between reserve's record and charge's call
		{"after:charge", 2, 1}, // after charge's call, before its record
	} {
		t.Run(c.killAt, func(t *testing.T) {
			db, leases := newPhasedDB(t)
			stub := newProvider(t)
			cmd, out, _ := child(t, "phased", "IDEM_DSN="+db.DSN, "IDEM_KEY=pay-1", "IDEM_STUB="+stub.URL, "IDEM_KILL_AT="+c.killAt)
			if !out.Scan() || out.Text() != "AT "+c.killAt {
				t.Fatalf("child: %q", out.Text())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed := time.Now()
			ctx := context.Background()
			got, err := idem.RunPhases(ctx, db.Pool(), leases, "", "pay-1", []byte("fp"), providerPhases(stub.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("resumed %v after the kill (lease TTL 1 s)", time.Since(killed).Round(time.Millisecond))
			for path, want := range map[string][2]int{"/reserve": {1, 1}, "/charge": {c.wantChargeCalls, c.wantKeys}, "/capture": {1, 1}} {
				if calls, keys := stub.count(path); calls != want[0] || keys != want[1] {
					t.Fatalf("%s: %d calls with %d keys, want %v", path, calls, keys, want)
				}
			}
			if string(got[0]) != "/reserve#1" {
				t.Fatalf("reserve's output %q: not the one the killed process recorded", got[0])
			}
			again, err := idem.RunPhases(ctx, db.Pool(), leases, "", "pay-1", []byte("fp"), providerPhases(stub.URL, func(string) {
				t.Error("a phase ran on a replay")
			}))
			if err != nil || fmt.Sprint(again) != fmt.Sprint(got) {
				t.Fatalf("replay: %q, %v; want %q", again, err, got)
			}
		})
	}
}

// TestPhasesRetryAfterACrashWaitsOutItsLease: the defaults made a retry
// after a crash fail — the dead attempt's lease (30 s) outlived the
// Manager's wait (5 s), so the retry timed out instead of resuming. Scaled
// down in the same proportion: a process killed inside its phases with a
// 3 s lease, and a retry through a Manager whose Acquire waits 300 ms. The
// retry resumes and finishes (recorded phases not called again), because
// RunPhases waits for a key for at least one lease TTL.
func TestPhasesRetryAfterACrashWaitsOutItsLease(t *testing.T) {
	leakCheck(t)
	db, _ := newPhasedDB(t)
	stub := newProvider(t)
	cmd, out, _ := child(t, "phased", "IDEM_DSN="+db.DSN, "IDEM_KEY=pay-1", "IDEM_STUB="+stub.URL,
		"IDEM_KILL_AT=charge", "IDEM_LEASE_TTL=3s")
	if !out.Scan() || out.Text() != "AT charge" {
		t.Fatalf("child: %q", out.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	shortWait := lease.New(db.Pool(), lease.WithTimeout(300*time.Millisecond))
	got, err := idem.RunPhases(context.Background(), db.Pool(), shortWait, "", "pay-1", []byte("fp"),
		providerPhases(stub.URL, nil), idem.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("the retry after the crash: %v", err)
	}
	for path, want := range map[string]int{"/reserve": 1, "/charge": 1, "/capture": 1} {
		if calls, _ := stub.count(path); calls != want {
			t.Fatalf("%s called %d times, want %d", path, calls, want)
		}
	}
	if string(got[0]) != "/reserve#1" {
		t.Fatalf("reserve's output %q: not the one the killed process recorded", got[0])
	}
}

// TestPhasesConcurrentAttemptsRunEachPhaseOnce: 8 attempts at once on one
// key: each phase is called once; all get the same outputs.
func TestPhasesConcurrentAttemptsRunEachPhaseOnce(t *testing.T) {
	leakCheck(t)
	db, leases := newPhasedDB(t)
	stub := newProvider(t)
	ctx := context.Background()
	outs := make([]string, 8)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := idem.RunPhases(ctx, db.SQL(), leases, "acme", "pay-2", []byte("fp"), providerPhases(stub.URL, nil))
			if err != nil {
				t.Error(err)
			}
			outs[i] = fmt.Sprintf("%q", got)
		}()
	}
	wg.Wait()
	for _, p := range phaseNames {
		if calls, _ := stub.count("/" + p); calls != 1 {
			t.Fatalf("%s called %d times", p, calls)
		}
	}
	for i, o := range outs {
		if o != outs[0] {
			t.Fatalf("attempt %d got %s, want %s", i, o, outs[0])
		}
	}
}

// TestPhasesErrorResumesAtFailedPhase: a phase's error ends the attempt;
// the retry resumes at that phase, the earlier ones not run again.
func TestPhasesErrorResumesAtFailedPhase(t *testing.T) {
	leakCheck(t)
	db, leases := newPhasedDB(t)
	ctx := context.Background()
	runs := map[string]int{}
	errDown := errors.New("provider down")
	phases := []idem.Phase{
		{Name: "a", Run: func(context.Context, string, [][]byte) ([]byte, error) { runs["a"]++; return []byte("A"), nil }},
		{Name: "b", Run: func(_ context.Context, _ string, done [][]byte) ([]byte, error) {
			runs["b"]++
			if runs["b"] == 1 {
				return nil, errDown
			}
			return append([]byte("B after "), done[0]...), nil
		}},
	}
	if _, err := idem.RunPhases(ctx, db.Pool(), leases, "", "k", nil, phases); !errors.Is(err, errDown) {
		t.Fatalf("err = %v, want the phase's error", err)
	}
	got, err := idem.RunPhases(ctx, db.Pool(), leases, "", "k", nil, phases)
	if err != nil || string(got[1]) != "B after A" || runs["a"] != 1 || runs["b"] != 2 {
		t.Fatalf("retry: %q, %v, runs %v", got, err, runs)
	}
}

// TestPhasesBadInput: a reused key, a key of Do, and bad arguments are
// refused before any phase runs.
func TestPhasesBadInput(t *testing.T) {
	leakCheck(t)
	db, leases := newPhasedDB(t)
	ctx := context.Background()
	ran := false
	ok := []idem.Phase{{Name: "p", Run: func(context.Context, string, [][]byte) ([]byte, error) { ran = true; return nil, nil }}}
	if _, err := idem.RunPhases(ctx, db.Pool(), leases, "", "k", []byte("1"), ok); err != nil || !ran {
		t.Fatal(err)
	}
	ran = false
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Do(ctx, tx, "", "do-key", nil, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		db     *pgxpool.Pool
		leases *lease.Manager
		key    string
		fp     string
		phases []idem.Phase
		opts   []idem.Option
		want   error
	}{
		{"reused key", db.Pool(), leases, "k", "2", ok, nil, idem.ErrKeyReused},
		{"a key of Do", db.Pool(), leases, "do-key", "", ok, nil, idem.ErrNotPhased},
		{"empty key", db.Pool(), leases, "", "", ok, nil, idem.ErrInvalidKey},
		{"over-long key", db.Pool(), leases, strings.Repeat("k", 256), "", ok, nil, idem.ErrInvalidKey},
		{"nil pool", nil, leases, "x", "", ok, nil, sqlock.ErrNilHandle},
		{"nil leases", db.Pool(), nil, "x", "", ok, nil, sqlock.ErrNilHandle},
		{"no phases", db.Pool(), leases, "x", "", nil, nil, sqlock.ErrInvalidOption},
		{"nil Run", db.Pool(), leases, "x", "", []idem.Phase{{Name: "p"}}, nil, sqlock.ErrNilHandle},
		{"duplicate names", db.Pool(), leases, "x", "", append(ok, ok...), nil, sqlock.ErrInvalidOption},
		{"short lease", db.Pool(), leases, "x", "", ok, []idem.Option{idem.WithLeaseTTL(time.Millisecond)}, sqlock.ErrInvalidOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var fp []byte
			if c.fp != "" {
				fp = []byte(c.fp)
			}
			if _, err := idem.RunPhases(ctx, c.db, c.leases, "", c.key, fp, c.phases, c.opts...); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if ran {
		t.Fatal("a phase ran on bad input")
	}
	if n := count(t, db, `SELECT count(*) FROM sqlock_idem WHERE key = 'x'`); n != 0 {
		t.Fatal("bad input left a key")
	}
}

// TestDoRefusesAPhasedKey: a key of RunPhases is ErrPhased for Do (pgx and
// database/sql), for DoTx and, as 422, for the middleware — while its
// phases run (the first phase held until every form has tried) and after
// they are done, when Do used to replay the phases' outputs as its own
// result. fn and the handler never run; the phases' record is untouched.
func TestDoRefusesAPhasedKey(t *testing.T) {
	leakCheck(t)
	db, leases := newPhasedDB(t)
	ctx := context.Background()
	pool := db.Pool()
	ran := false
	fn := func(context.Context) (string, error) { ran = true; return "do's result", nil }
	// The middleware fingerprints as RunPhases was given: only the form
	// differs.
	mw := serveBehind(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }),
		idem.WithFingerprint(func(*http.Request, []byte) []byte { return []byte("fp") }))
	tryEveryForm := func(when string) {
		t.Helper()
		if _, err := pgxTxDo(ctx, pool, "pay", fn); !errors.Is(err, idem.ErrPhased) {
			t.Errorf("%s: Do (pgx): %v, want ErrPhased", when, err)
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := idem.Do(ctx, tx, "", "pay", []byte("fp"), fn); !errors.Is(err, idem.ErrPhased) {
			t.Errorf("%s: Do (database/sql): %v, want ErrPhased", when, err)
		}
		_ = tx.Rollback()
		if _, err := idem.DoTx(ctx, pool, "", "pay", []byte("fp"), func(ctx context.Context, _ pgx.Tx) (string, error) { return fn(ctx) }); !errors.Is(err, idem.ErrPhased) {
			t.Errorf("%s: DoTx: %v, want ErrPhased", when, err)
		}
		if r := mw.post(t, "", "pay", "x"); r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: middleware: %d %s, want 422", when, r.status, r.body)
		}
		if ran {
			t.Fatalf("%s: fn or the handler ran on a key of RunPhases", when)
		}
	}
	inside, release := make(chan struct{}), make(chan struct{})
	phases := []idem.Phase{
		{Name: "a", Run: func(context.Context, string, [][]byte) ([]byte, error) {
			close(inside)
			<-release
			return []byte(`"A"`), nil
		}},
		{Name: "b", Run: func(context.Context, string, [][]byte) ([]byte, error) { return []byte(`"B"`), nil }},
	}
	done := make(chan error, 1)
	go func() {
		_, err := idem.RunPhases(ctx, pool, leases, "", "pay", []byte("fp"), phases)
		done <- err
	}()
	<-inside
	tryEveryForm("while the phases run")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tryEveryForm("after the phases")
	got, err := idem.RunPhases(ctx, pool, leases, "", "pay", []byte("fp"), phases)
	if err != nil || fmt.Sprintf("%s", got) != `["A" "B"]` {
		t.Fatalf("RunPhases after the refusals: %s, %v; want its outputs", got, err)
	}
}

// pgxTxDo is idem.Do with key and fingerprint "fp" in a pgx transaction of
// pool, committed if Do returns no error.
func pgxTxDo[T any](ctx context.Context, pool *pgxpool.Pool, key string, fn func(context.Context) (T, error)) (T, error) {
	var v T
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		v, err = idem.Do(ctx, tx, "", key, []byte("fp"), fn)
		return err
	})
	return v, err
}
