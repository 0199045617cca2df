package contention

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SweepDeadlines runs base once per deadline and form, each run on a
// database of its own that newDB creates (and whose drop function it
// returns), so that pg_stat_database counts each run's sessions alone.
// Results come deadline by deadline, in the order of forms.
func SweepDeadlines(ctx context.Context, base DeadlineConfig, deadlines []time.Duration, forms []Form,
	newDB func(context.Context) (dsn string, drop func(), err error)) ([]DeadlineResult, error) {
	var out []DeadlineResult
	for _, d := range deadlines {
		for _, f := range forms {
			dsn, drop, err := newDB(ctx)
			if err != nil {
				return out, err
			}
			c := base
			c.DSN, c.Form, c.Deadline = dsn, f, d
			r, err := RunDeadline(ctx, c)
			drop()
			if err != nil {
				return out, fmt.Errorf("%s at %v: %w", f, d, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// DeadlinesMarkdown is the benchmark report's section on request
// deadlines: successes and new connections per second against the
// deadline, one row per form, from SweepDeadlines' results.
func DeadlinesMarkdown(rs []DeadlineResult) string {
	if len(rs) == 0 {
		return ""
	}
	var deadlines []time.Duration
	var forms []Form
	cell := map[Form]map[time.Duration]DeadlineResult{}
	for _, r := range rs {
		f, d := r.Config.Form, r.Config.Deadline
		if cell[f] == nil {
			cell[f] = map[time.Duration]DeadlineResult{}
			forms = append(forms, f)
		}
		if !slices.Contains(deadlines, d) {
			deadlines = append(deadlines, d)
		}
		cell[f][d] = r
	}
	c := rs[0].Config
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## Under request deadlines\n\n")
	w("%d callers on one key, each call under its own `context.WithTimeout`, a critical section of %v ", c.Workers, c.Hold)
	w("(read, `pg_sleep`, write), on a warm pool of %d connections (advisory forms: one more, for the ", c.Pool)
	w("critical section's statements); `internal/tools/contention`'s `RunDeadline`. Each cell: **successes per second** / ")
	w("new connection attempts plus pgx's cancel requests per second (every one a process the server forks).\n\n")
	w("| form |")
	for _, d := range deadlines {
		w(" %v |", d)
	}
	w("\n|---|")
	for range deadlines {
		w("---|")
	}
	w("\n")
	for _, f := range forms {
		w("| %s |", f)
		for _, d := range deadlines {
			r, ok := cell[f][d]
			if !ok {
				w(" |")
				continue
			}
			w(" **%.0f** / %.0f |", r.SuccessesPerSecond(), float64(r.Dials)/r.Elapsed.Seconds())
		}
		w("\n")
	}
	w("\n")
	return b.String()
}
