package httpver_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// Two clients read version 7 and both PUT with its ETag: the database
// takes exactly one; the other is 412 with the ETag of version 8, the
// winner's edit is the row, and nothing of the loser's is — on each path.
func TestTwoClientsOneVersion(t *testing.T) {
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			ctx := ctxT(t)
			e := newEnv(t, false)
			e.seed(1, 7)
			url := e.serve(path) + "/orders/1"
			c := &http.Client{}
			read := do(t, ctx, c, http.MethodGet, url, nil)
			if read.status != http.StatusOK || read.etag != e.kind.ETag("1", 7) {
				t.Fatalf("GET: %d ETag %s, want 200 %s", read.status, read.etag, e.kind.ETag("1", 7))
			}
			var wg sync.WaitGroup
			got := make([]response, 2)
			errs := make([]error, 2)
			start := make(chan struct{})
			for i := range got {
				wg.Go(func() {
					<-start
					got[i], errs[i] = send(ctx, c, http.MethodPut, url,
						edit{Status: "edited", Note: fmt.Sprintf("client %d", i)}, "If-Match", read.etag)
				})
			}
			close(start)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			win, lose := 0, 1
			if got[1].status == http.StatusOK {
				win, lose = 1, 0
			}
			v8 := e.kind.ETag("1", 8)
			if got[win].status != http.StatusOK || got[win].etag != v8 {
				t.Fatalf("winner: %d ETag %s body %s, want 200 %s", got[win].status, got[win].etag, got[win].body, v8)
			}
			if got[lose].status != http.StatusPreconditionFailed || got[lose].etag != v8 {
				t.Fatalf("loser: %d ETag %s body %s, want 412 %s", got[lose].status, got[lose].etag, got[lose].body, v8)
			}
			if p := got[lose].problem; p["status"] != float64(412) || p["etag"] != v8 || p["detail"] == "" {
				t.Fatalf("loser's problem body: %v", p)
			}
			if row := e.row(1); row.Version != 8 || row.Note != fmt.Sprintf("client %d", win) {
				t.Fatalf("row %+v: want version 8 with client %d's note", row, win)
			}
		})
	}
}

// 64 clients each add one to a counter by GET, then PUT of counter+1 with
// the ETag read, again after each 412. Every version has exactly one
// winner (each new ETag is answered to exactly one PUT), and the counter
// the database holds is 64: no client's increment was lost. The HTTP
// layer is the same for every path, so GORM and sqlx, whose writes cost
// more under -race, run it with 16 clients.
func TestConcurrentConditionalWriters(t *testing.T) {
	for _, path := range paths {
		writers := int64(64)
		if path != "versioned" {
			writers = 16
		}
		t.Run(path, func(t *testing.T) {
			ctx := ctxT(t)
			e := newEnv(t, false)
			e.seed(1, 1)
			url := e.serve(path) + "/orders/1"
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: int(writers)}}
			var (
				mu      sync.Mutex
				winners = map[string]int{} // new ETag → PUTs answered 2xx with it
				lost    int
				wg      sync.WaitGroup
				start   = make(chan struct{})
				errs    = make(chan error, writers)
			)
			for range writers {
				wg.Go(func() {
					<-start
					// Bounded: each round some writer wins, so a writer
					// needs at most `writers` rounds.
					for range 4 * writers {
						read, err := send(ctx, c, http.MethodGet, url, nil)
						if err != nil {
							errs <- err
							return
						}
						var o Order
						if err := jsonUnmarshal(read.body, &o); err != nil {
							errs <- err
							return
						}
						put, err := send(ctx, c, http.MethodPut, url,
							edit{Status: "counted", Counter: o.Counter + 1}, "If-Match", read.etag)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						switch put.status {
						case http.StatusOK:
							winners[put.etag]++
						case http.StatusPreconditionFailed:
							lost++
						}
						mu.Unlock()
						switch put.status {
						case http.StatusOK:
							return
						case http.StatusPreconditionFailed:
							continue
						}
						errs <- fmt.Errorf("PUT: %d %s", put.status, put.body)
						return
					}
					errs <- fmt.Errorf("no write after %d rounds", 4*writers)
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			row := e.row(1)
			if row.Counter != writers || row.Version != 1+writers {
				t.Fatalf("row %+v: want counter %d at version %d (a lost update otherwise)", row, writers, 1+writers)
			}
			for v := int64(2); v <= 1+writers; v++ {
				if n := winners[e.kind.ETag("1", v)]; n != 1 {
					t.Fatalf("version %d: %d winners, want exactly 1", v, n)
				}
			}
			if int64(len(winners)) != writers {
				t.Fatalf("%d distinct winning ETags, want %d", len(winners), writers)
			}
			t.Logf("%s: %d writes, %d answered 412", path, writers, lost)
		})
	}
}
