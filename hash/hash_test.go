package hash

import (
	"strings"
	"testing"
)

// Values read from a real PostgreSQL 15 server (SELECT hashtext(s), hashtextextended(s, seed));
// TestAgainstServer checks many more against the server the tests start.
var pinned = []struct {
	s        string
	text     int32
	extended int64
}{
	{"booking:seat-42", -1116035828, 245161856035628300},
	{"payment:order-123", -1536535568, 5806998960378369008},
	{"", -1477818771, -6939563903564495251},
	{"a", 1075015857, 3591986179850072241},
}

func TestPinnedValues(t *testing.T) {
	for _, p := range pinned {
		if got := Text(p.s); got != p.text {
			t.Errorf("Text(%q) = %d, want %d", p.s, got, p.text)
		}
		if got := TextExtended(p.s, 0); got != p.extended {
			t.Errorf("TextExtended(%q, 0) = %d, want %d", p.s, got, p.extended)
		}
	}
}

// The low word of the extended hash with seed 0 is the 32-bit hash: the two
// functions share their state and differ only in what they return.
func TestExtendedSeedZeroContainsText(t *testing.T) {
	for n := 0; n < 300; n++ {
		s := strings.Repeat("x", n)
		if uint32(TextExtended(s, 0)) != uint32(Text(s)) {
			t.Fatalf("len %d: low word of TextExtended differs from Text", n)
		}
	}
}

func FuzzTextExtended(f *testing.F) {
	for _, p := range pinned {
		f.Add(p.s, int64(0))
	}
	f.Add("payment:order-123", int64(-1))
	f.Fuzz(func(t *testing.T, s string, seed int64) {
		h := TextExtended(s, seed)
		if h != TextExtended(s, seed) {
			t.Fatal("not deterministic")
		}
		if uint32(TextExtended(s, 0)) != uint32(Text(s)) {
			t.Fatal("low word of TextExtended(s, 0) differs from Text(s)")
		}
		// A string one byte longer must run through a different state;
		// equality would mean the tail switch dropped a byte.
		if len(s) < 64 && Text(s+"\x00") == Text(s) && TextExtended(s+"\x00", seed) == h {
			t.Fatalf("appending a byte changed neither hash of %q", s)
		}
	})
}

var sink64 int64
var sink32 int32

func benchKey(n int) string { return strings.Repeat("k", n) }

func BenchmarkText16(b *testing.B)         { benchText(b, 16) }
func BenchmarkText1K(b *testing.B)         { benchText(b, 1024) }
func BenchmarkTextExtended16(b *testing.B) { benchExt(b, 16) }
func BenchmarkTextExtended1K(b *testing.B) { benchExt(b, 1024) }

func benchText(b *testing.B, n int) {
	s := benchKey(n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		sink32 = Text(s)
	}
}

func benchExt(b *testing.B, n int) {
	s := benchKey(n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		sink64 = TextExtended(s, 42)
	}
}

func TestZeroAllocs(t *testing.T) {
	s := benchKey(1024)
	if n := testing.AllocsPerRun(100, func() { sink64 = TextExtended(s, 7); sink32 = Text(s) }); n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}
