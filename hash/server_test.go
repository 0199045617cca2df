package hash_test

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlock/sqlock/hash"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var alphabets = map[string][]rune{
	"ascii": []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_/ .!~"),
	"multi": []rune("äöüßéèçñøåłžš日本語中文字漢한국어조선말🙂🚀👩‍💻🎉∑∂≈€£¥ѢѣΩωאב"),
}

// randomString returns a valid UTF-8 string of exactly n bytes (ASCII pads
// where a multi-byte rune would not fit). PostgreSQL text cannot hold NUL.
func randomString(r *rand.Rand, n int, alphabet []rune) string {
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		c := alphabet[r.IntN(len(alphabet))]
		if b.Len()+utf8.RuneLen(c) > n {
			c = rune('a' + r.IntN(26))
		}
		b.WriteRune(c)
	}
	return b.String()
}

type sample struct {
	s    string
	seed int64
}

func samples() []sample {
	r := rand.New(rand.NewPCG(2026, 11))
	seeds := []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 1 << 32}
	var strs []string
	for n := 0; n <= 300; n++ { // every byte length, both alphabets
		strs = append(strs, randomString(r, n, alphabets["ascii"]), randomString(r, n, alphabets["multi"]))
	}
	for i := 0; i < 12000; i++ {
		strs = append(strs, randomString(r, r.IntN(80), alphabets["ascii"]))
	}
	for i := 0; i < 8000; i++ {
		strs = append(strs, randomString(r, r.IntN(120), alphabets["multi"]))
	}
	for i := 0; i < 40; i++ { // long: 8 KiB and a little beyond
		strs = append(strs, randomString(r, 8192+r.IntN(13), alphabets[[]string{"ascii", "multi"}[i%2]]))
	}
	var out []sample
	for i, s := range strs {
		out = append(out, sample{s, 0}, sample{s, seeds[i%len(seeds)]}, sample{s, int64(r.Uint64())})
	}
	return out
}

// TestAgainstServer compares both functions with the real server's.
func TestAgainstServer(t *testing.T) {
	db := pgtest.New(t)
	pool := db.Pool()
	ctx := context.Background()
	all := samples()
	strs := map[string]bool{}
	for _, s := range all {
		strs[s.s] = true
	}
	const batch = 3000
	mismatches := 0
	for start := 0; start < len(all); start += batch {
		part := all[start:min(start+batch, len(all))]
		ss := make([]string, len(part))
		seeds := make([]int64, len(part))
		for i, p := range part {
			ss[i], seeds[i] = p.s, p.seed
		}
		rows, err := pool.Query(ctx, `SELECT hashtext(s), hashtextextended(s, seed)
			FROM unnest($1::text[], $2::int8[]) WITH ORDINALITY AS u(s, seed, i) ORDER BY i`, ss, seeds)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for rows.Next() {
			var text int32
			var ext int64
			if err := rows.Scan(&text, &ext); err != nil {
				t.Fatal(err)
			}
			p := part[i]
			if got := hash.Text(p.s); got != text {
				mismatches++
				if mismatches < 10 {
					t.Errorf("Text(len %d %.40q) = %d, server %d", len(p.s), p.s, got, text)
				}
			}
			if got := hash.TextExtended(p.s, p.seed); got != ext {
				mismatches++
				if mismatches < 10 {
					t.Errorf("TextExtended(len %d %.40q, %d) = %d, server %d", len(p.s), p.s, p.seed, got, ext)
				}
			}
			i++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if i != len(part) {
			t.Fatalf("server returned %d rows for %d samples", i, len(part))
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d mismatches", mismatches)
	}
	t.Logf("%d distinct strings, %d (string, seed) pairs: all equal to the server", len(strs), len(all))
}
