package main

import (
	"fmt"
	"slices"
	"strings"
)

// comparison is one row of a targets table: a form against its baseline,
// both measured in the same benchmark run. The throughput ratio of a run is
// the baseline's time over the form's (or the benchmark's own ratio
// metric, when it names one); the row shows the median over runs.
type comparison struct {
	label      string
	pkg, bench string // short package path, benchmark name without "Benchmark"
	base, form string // time-per-op units of the baseline and of the form
	ratio      string // a ratio unit the benchmark reports, used instead of base/form
	baseRT     string // round trips per op units (optional)
	formRT     string
	min        float64 // the target; 0: shown for comparison only
	sameTrips  bool    // the target also wants the baseline's round trips
	expect     string  // what is expected when there is no target
	why        string  // said under the table when the target is missed
	alt        []alt   // other same-run forms a missed target is compared with
}

// alt is another form of the same benchmark: a missed target says how the
// form compares with it.
type alt struct{ label, unit string }

var txlockAlts = []alt{{"the lock folded into BEGIN by hand", "hand-µs/tx"}, {"txlock's own statements sent by hand", "stmts-µs/tx"},
	{"the floor (BEGIN + SELECT $1::int8)", "floor-µs/tx"}}

const guardWhy = "The guard is a statement of server work (a FOR KEY SHARE row lock, owner and expiry checked) that travels " +
	"in BEGIN's round trip: it adds no round trip, only the server's time for one more statement."

// networkRows and loopbackRows are the targets of issue #19 (and of the
// issues the rows name), with the naive forms beside them.
var networkRows = []comparison{
	{label: "txlock.DoPgx vs the unlocked transaction (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "locked-µs/tx", ratio: "tput-ratio", baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op",
		min: 0.97, sameTrips: true, alt: txlockAlts},
	{label: "naive: the lock as its own statement, BEGIN; SELECT pg_advisory_xact_lock($1); … (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "naive-µs/tx", ratio: "naive-ratio", baseRT: "unlocked-roundtrips/op", formRT: "naive-roundtrips/op", expect: "≈ 0.75"},
	{label: "the lock folded into BEGIN by hand, BeginQuery (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "hand-µs/tx", ratio: "hand-ratio", baseRT: "unlocked-roundtrips/op", formRT: "hand-roundtrips/op"},
	{label: "txlock.Do through txlock.OpenDB vs the unlocked transaction (database/sql)", pkg: "txlock", bench: "Uncontended/sql+OpenDB",
		base: "unlocked-µs/tx", form: "locked-µs/tx", ratio: "tput-ratio", baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op",
		min: 0.97, sameTrips: true},
	{label: "naive: the lock as its own statement (database/sql)", pkg: "txlock", bench: "Uncontended/sql+OpenDB",
		base: "unlocked-µs/tx", form: "naive-µs/tx", ratio: "naive-ratio", baseRT: "unlocked-roundtrips/op", formRT: "naive-roundtrips/op", expect: "≈ 0.75"},
	{label: "txlock.Do on a plain *sql.DB (no OpenDB: the lock is a statement of its own)", pkg: "txlock", bench: "Uncontended/sql",
		base: "unlocked-µs/tx", form: "locked-µs/tx", ratio: "tput-ratio", baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op"},
	{label: "advisory TryLock+Release vs the same statements by hand (pgxpool)", pkg: "advisory", bench: "CycleRatio/pgxpool",
		base: "base-ns/cycle", form: "lib-ns/cycle", ratio: "ratio", baseRT: "base-roundtrips/op", formRT: "lib-roundtrips/op", min: 0.95},
	{label: "advisory TryLock+Release vs the same statements by hand (database/sql)", pkg: "advisory", bench: "CycleRatio/sql-pgx",
		base: "base-ns/cycle", form: "lib-ns/cycle", ratio: "ratio", baseRT: "base-roundtrips/op", formRT: "lib-roundtrips/op", min: 0.95},
	{label: "GORM versioned Updates (map) vs plain GORM", pkg: "gormplugin", bench: "PostgresPaired/map",
		base: "plain-ns/call", form: "versioned-ns/call", baseRT: "plain-roundtrips/op", formRT: "versioned-roundtrips/op", min: 0.98},
	{label: "GORM versioned Updates (struct) vs plain GORM", pkg: "gormplugin", bench: "PostgresPaired/struct",
		base: "plain-ns/call", form: "versioned-ns/call", baseRT: "plain-roundtrips/op", formRT: "versioned-roundtrips/op", min: 0.98},
	{label: "versioned.Update vs the versioned write by hand", pkg: "versioned", bench: "Update/interleaved",
		base: "hand-ns/op", form: "helper-ns/op", min: 0.97},
	{label: "sqlxhelpers struct-driven Update vs by hand (pgx)", pkg: "sqlxhelpers", bench: "UpdateVsHandWritten/pgx",
		base: "hand-ns/write", form: "struct-ns/write", min: 0.97},
	{label: "sqlxhelpers struct-driven Update vs by hand (lib/pq)", pkg: "sqlxhelpers", bench: "UpdateVsHandWritten/postgres",
		base: "hand-ns/write", form: "struct-ns/write", min: 0.97},
	{label: "lease.BeginGuarded (txlock.OpenDB) vs the unguarded transaction (issue 15: ≥ 0.95)", pkg: "lease", bench: "GuardedBegin/lag-0s/database-sql-OpenDB",
		base: "plain-ns/op", form: "guarded-ns/op", baseRT: "plain-roundtrips/op", formRT: "guarded-roundtrips/op", min: 0.95, sameTrips: true, why: guardWhy},
	{label: "lease QueueGuard in the BEGIN batch (pgx) vs the unguarded transaction (issue 15: ≥ 0.95)", pkg: "lease", bench: "GuardedBegin/lag-0s/pgx-QueueGuard-with-BEGIN",
		base: "plain-ns/op", form: "guarded-ns/op", baseRT: "plain-roundtrips/op", formRT: "guarded-roundtrips/op", min: 0.95, sameTrips: true, why: guardWhy},
	{label: "naive: lease Guard as a statement of its own (pgx)", pkg: "lease", bench: "GuardedWrite/Guard",
		base: "plain-ns/op", form: "guarded-ns/op", baseRT: "plain-roundtrips/op", formRT: "guarded-roundtrips/op"},
	{label: "lease TryAcquire+Release vs the same statements by hand", pkg: "lease", bench: "AcquireRelease",
		base: "hand-ns/op", form: "lease-ns/op", baseRT: "hand-roundtrips/op", formRT: "lease-roundtrips/op", min: 0.9},
	{label: "idem.DoTx vs the same transaction without idem (pgx; issue 16)", pkg: "idem", bench: "IdempotentTx/loopback",
		base: "plain-ns/op", form: "idem-ns/op", baseRT: "plain-roundtrips/op", formRT: "idem-roundtrips/op", min: 0.9, sameTrips: true,
		why: idemWhy},
	{label: "idem.DoTx replay vs an autocommit SELECT of the stored row (pgx)", pkg: "idem", bench: "Replay",
		base: "select-ns/op", form: "replay-ns/op", baseRT: "select-roundtrips/op", formRT: "replay-roundtrips/op", sameTrips: true},
}

// idemWhy is where an idempotent transaction's time goes beyond the plain
// one's, round trips being equal: the claim (a read ahead of BEGIN, an
// INSERT into a unique index) travels in BEGIN's batch and the result (an UPDATE of the
// key's row) in COMMIT's, so what is left is their server work.
const idemWhy = "The claim (an INSERT … ON CONFLICT DO NOTHING into the keys' unique index) travels in BEGIN's batch, " +
	"behind the read of a recorded result that answers a replay ahead of BEGIN, and the result (an UPDATE of the key's row) " +
	"in COMMIT's: no round trip is added; the difference is the server's work for those statements, beside a transaction " +
	"whose own work is one INSERT."

var loopbackRows = []comparison{
	{label: "txlock.DoPgx vs the floor: BEGIN + the cheapest prepared statement in one batch (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "floor-µs/tx", form: "locked-µs/tx", ratio: "floor/locked-ratio", baseRT: "floor-roundtrips/op", formRT: "locked-roundtrips/op", min: 0.95, sameTrips: true,
		alt: txlockAlts[:2], why: "The floor's statement takes no lock; txlock's sets lock_timeout for the transaction and takes a lock that COMMIT releases: " +
			"server work the floor does not do (the next two rows split the gap: txlock against its own statements sent by hand is its client cost; " +
			"those statements against the floor, the server's)."},
	{label: "txlock.DoPgx vs its own statements sent by hand in the BEGIN batch (pgx): txlock's client cost", pkg: "txlock", bench: "Uncontended/pgx",
		base: "stmts-µs/tx", form: "locked-µs/tx", ratio: "stmts/locked-ratio", baseRT: "stmts-roundtrips/op", formRT: "locked-roundtrips/op"},
	{label: "those statements by hand vs the floor (pgx): the lock's server cost", pkg: "txlock", bench: "Uncontended/pgx",
		base: "floor-µs/tx", form: "stmts-µs/tx", ratio: "floor/stmts-ratio", baseRT: "floor-roundtrips/op", formRT: "stmts-roundtrips/op"},
	{label: "txlock.DoPgx with TryOnce (no lock_timeout) vs the floor (pgx)", pkg: "txlock", bench: "Uncontended/pgx/try-once",
		base: "floor-µs/tx", form: "locked-µs/tx", ratio: "floor/locked-ratio", baseRT: "floor-roundtrips/op", formRT: "locked-roundtrips/op"},
	{label: "txlock.DoPgx vs the unlocked transaction (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "locked-µs/tx", ratio: "tput-ratio", baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op", sameTrips: true},
	{label: "the floor itself vs the unlocked transaction (pgx): what any statement sent with BEGIN costs", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "floor-µs/tx", ratio: "floor-ratio", baseRT: "unlocked-roundtrips/op", formRT: "floor-roundtrips/op"},
	{label: "naive: the lock as its own statement (pgx)", pkg: "txlock", bench: "Uncontended/pgx",
		base: "unlocked-µs/tx", form: "naive-µs/tx", ratio: "naive-ratio", baseRT: "unlocked-roundtrips/op", formRT: "naive-roundtrips/op"},
	{label: "txlock.Do through txlock.OpenDB vs the unlocked transaction (database/sql)", pkg: "txlock", bench: "Uncontended/sql+OpenDB",
		base: "unlocked-µs/tx", form: "locked-µs/tx", ratio: "tput-ratio", baseRT: "unlocked-roundtrips/op", formRT: "locked-roundtrips/op",
		min: 0.85, sameTrips: true},
	{label: "naive: the lock as its own statement (database/sql)", pkg: "txlock", bench: "Uncontended/sql+OpenDB",
		base: "unlocked-µs/tx", form: "naive-µs/tx", ratio: "naive-ratio", baseRT: "unlocked-roundtrips/op", formRT: "naive-roundtrips/op"},
	{label: "advisory TryLock+Release vs the same statements by hand (pgxpool)", pkg: "advisory", bench: "CycleRatio/pgxpool",
		base: "base-ns/cycle", form: "lib-ns/cycle", ratio: "ratio", baseRT: "base-roundtrips/op", formRT: "lib-roundtrips/op", min: 0.9},
	{label: "advisory TryLock+Release vs the same statements by hand (database/sql)", pkg: "advisory", bench: "CycleRatio/sql-pgx",
		base: "base-ns/cycle", form: "lib-ns/cycle", ratio: "ratio", baseRT: "base-roundtrips/op", formRT: "lib-roundtrips/op", min: 0.9},
	{label: "GORM versioned Updates (map) vs plain GORM (≤ 1.03× the time)", pkg: "gormplugin", bench: "PostgresPaired/map",
		base: "plain-ns/call", form: "versioned-ns/call", baseRT: "plain-roundtrips/op", formRT: "versioned-roundtrips/op", min: 1 / 1.03},
	{label: "GORM versioned Updates (struct) vs plain GORM (≤ 1.03× the time)", pkg: "gormplugin", bench: "PostgresPaired/struct",
		base: "plain-ns/call", form: "versioned-ns/call", baseRT: "plain-roundtrips/op", formRT: "versioned-roundtrips/op", min: 1 / 1.03},
	{label: "versioned.Update vs the versioned write by hand", pkg: "versioned", bench: "Update/interleaved",
		base: "hand-ns/op", form: "helper-ns/op", min: 0.97},
	{label: "sqlxhelpers struct-driven Update vs by hand (pgx)", pkg: "sqlxhelpers", bench: "UpdateVsHandWritten/pgx",
		base: "hand-ns/write", form: "struct-ns/write", min: 0.97},
	{label: "sqlxhelpers struct-driven Update vs by hand (lib/pq)", pkg: "sqlxhelpers", bench: "UpdateVsHandWritten/postgres",
		base: "hand-ns/write", form: "struct-ns/write", min: 0.97},
	{label: "lease.BeginGuarded (txlock.OpenDB) vs the unguarded transaction (issue 15: ≥ 0.95)", pkg: "lease", bench: "GuardedBegin/lag-0s/database-sql-OpenDB",
		base: "plain-ns/op", form: "guarded-ns/op", baseRT: "plain-roundtrips/op", formRT: "guarded-roundtrips/op", min: 0.95, sameTrips: true, why: guardWhy},
	{label: "lease TryAcquire+Release vs the same statements by hand", pkg: "lease", bench: "AcquireRelease",
		base: "hand-ns/op", form: "lease-ns/op", baseRT: "hand-roundtrips/op", formRT: "lease-roundtrips/op", min: 0.9},
	{label: "idem.DoTx vs the same transaction without idem (pgx; issue 16)", pkg: "idem", bench: "IdempotentTx/loopback",
		base: "plain-ns/op", form: "idem-ns/op", baseRT: "plain-roundtrips/op", formRT: "idem-roundtrips/op", min: 0.9, sameTrips: true,
		why: idemWhy},
}

// rowResult is a comparison evaluated on one run's benchmarks.
type rowResult struct {
	c               comparison
	found           bool
	ratio           float64   // median over runs
	runs            []float64 // each run's ratio
	baseUs, formUs  float64   // medians, µs per op
	baseRT, formRT  float64   // medians, round trips per op (-1: not counted)
	met, hasVerdict bool
}

func find(benches []bench, pkg, name string) *bench {
	for i := range benches {
		if short(benches[i].pkg) == pkg && benches[i].name == name {
			return &benches[i]
		}
	}
	return nil
}

// micro converts a median of a time-per-op unit to µs.
func micro(b *bench, unit string) float64 {
	v := b.median(unit)
	if strings.HasPrefix(unit, "ns/") || strings.Contains(unit, "-ns/") {
		return v / 1000
	}
	return v
}

func evaluate(benches []bench, c comparison) rowResult {
	r := rowResult{c: c, baseRT: -1, formRT: -1}
	b := find(benches, c.pkg, c.bench)
	if b == nil || len(b.values[c.base]) == 0 || len(b.values[c.form]) == 0 {
		return r
	}
	r.found = true
	if c.ratio != "" && len(b.values[c.ratio]) > 0 {
		r.runs = slices.Clone(b.values[c.ratio])
	} else {
		bv, fv := b.values[c.base], b.values[c.form]
		for i := range min(len(bv), len(fv)) {
			if fv[i] > 0 {
				r.runs = append(r.runs, bv[i]/fv[i])
			}
		}
	}
	r.ratio = medianOf(r.runs)
	r.baseUs, r.formUs = micro(b, c.base), micro(b, c.form)
	if c.baseRT != "" && len(b.values[c.baseRT]) > 0 && len(b.values[c.formRT]) > 0 {
		r.baseRT, r.formRT = b.median(c.baseRT), b.median(c.formRT)
	}
	if c.min > 0 {
		r.hasVerdict = true
		r.met = r.ratio >= c.min
		if c.sameTrips && r.baseRT >= 0 && r.formRT != r.baseRT {
			r.met = false
		}
	}
	return r
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// targetsTable writes one targets table and returns the rows it
// evaluated.
func targetsTable(b *strings.Builder, benches []bench, rows []comparison) []rowResult {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("| comparison | baseline µs/op | form µs/op | Δ µs | round trips form / baseline | throughput ratio (runs) | target | met |\n")
	w("|---|---|---|---|---|---|---|---|\n")
	var out []rowResult
	for _, c := range rows {
		r := evaluate(benches, c)
		out = append(out, r)
		if !r.found {
			w("| %s | – | – | – | – | not in this run (`%s` %s) | %s | – |\n", c.label, c.pkg, c.bench, targetText(c))
			continue
		}
		trips := "–"
		if r.baseRT >= 0 {
			trips = fmt.Sprintf("%s / %s", num(r.formRT), num(r.baseRT))
		}
		verdict := "–"
		if r.hasVerdict {
			verdict = "yes"
			if !r.met {
				verdict = "**no**"
			}
		}
		w("| %s | %.0f | %.0f | %+.0f | %s | **%.3f** (%s) | %s | %s |\n", c.label, r.baseUs, r.formUs, r.formUs-r.baseUs,
			trips, r.ratio, list(r.runs), targetText(c), verdict)
	}
	w("\n")
	return out
}

func targetText(c comparison) string {
	switch {
	case c.min > 0 && c.sameTrips:
		return fmt.Sprintf("≥ %.2f, same round trips", c.min)
	case c.min > 0:
		return fmt.Sprintf("≥ %.2f", c.min)
	case c.expect != "":
		return c.expect + " expected"
	}
	return "–"
}

func notMet(rows []rowResult) []rowResult {
	var out []rowResult
	for _, r := range rows {
		if r.found && r.hasVerdict && !r.met {
			out = append(out, r)
		}
	}
	return out
}

// whyMissed says what the run shows about a missed target: a round-trip
// difference when there is one, the row's own explanation, and otherwise
// where the time went.
func whyMissed(r rowResult, benches []bench, loopback []bench) string {
	var parts []string
	if r.baseRT >= 0 && r.formRT != r.baseRT {
		parts = append(parts, fmt.Sprintf("It costs %s round trips per operation against %s.", num(r.formRT), num(r.baseRT)))
	} else if r.baseRT >= 0 {
		who := "client and server share"
		if loopback != nil { // a network row: the proxy runs on the same cores
			who = "client, server and the proxy share"
		}
		parts = append(parts, fmt.Sprintf("Round trips are equal (%s), so the %+.0f µs per operation is CPU: %s 2 cores with each other and with other work; the runs spread %s.",
			num(r.formRT), r.formUs-r.baseUs, who, spread(r.runs, 3)))
	} else {
		parts = append(parts, fmt.Sprintf("Both send one statement per operation; the %+.0f µs is CPU on a shared machine; the runs spread %s.", r.formUs-r.baseUs, spread(r.runs, 3)))
	}
	if b := find(benches, r.c.pkg, r.c.bench); b != nil {
		for _, a := range r.c.alt {
			if len(b.values[a.unit]) > 0 && r.formUs > 0 {
				parts = append(parts, fmt.Sprintf("Against %s in the same run: %.3f (%.0f µs/op).", a.label, micro(b, a.unit)/r.formUs, micro(b, a.unit)))
			}
		}
	}
	if loopback != nil {
		if l := evaluate(loopback, r.c); l.found {
			parts = append(parts, fmt.Sprintf("The same pair differed by %+.0f µs per operation over loopback in this run: what does not grow with the round trip is CPU, not the network.", l.formUs-l.baseUs))
		}
	}
	if r.c.why != "" {
		parts = append(parts, r.c.why)
	}
	return strings.Join(parts, " ")
}

// spread is "min–max" of v with digits decimals, or "–" if v is empty.
func spread(v []float64, digits int) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.*f–%.*f", digits, slices.Min(v), digits, slices.Max(v))
}

// saved states, from the run, what the naive forms' extra round trip costs
// over the simulated network.
func saved(b *strings.Builder, net *netRun) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("What a round trip is worth here: SELECT 1 takes %s through the proxy. ", fmtDur(net.before.proxied))
	for _, c := range []struct{ label, bench string }{{"pgx", "Uncontended/pgx"}, {"database/sql", "Uncontended/sql+OpenDB"}} {
		bn := find(net.benches, "txlock", c.bench)
		if bn == nil || len(bn.values["naive-µs/tx"]) == 0 {
			continue
		}
		naive, locked, unlocked := bn.median("naive-µs/tx"), bn.median("locked-µs/tx"), bn.median("unlocked-µs/tx")
		w("On %s the lock as a statement of its own costs %.0f µs per transaction more than txlock's lock folded into BEGIN (%.0f against %.0f µs; %.0f%% of an unlocked transaction). ",
			c.label, naive-locked, naive, locked, 100*(naive-locked)/unlocked)
	}
	w("\n\n")
}
