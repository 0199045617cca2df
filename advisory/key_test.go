package advisory

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestKeyConstructors(t *testing.T) {
	if n, ok := KeyOf("payment:order-123").Int64(); !ok || n != 5806998960378369008 {
		t.Fatalf("KeyOf = %d %v", n, ok)
	}
	if n, ok := KeyText("payment:order-123").Int64(); !ok || n != -1536535568 {
		t.Fatalf("KeyText must sign-extend hashtext: %d %v", n, ok)
	}
	for _, k := range []Key{{}, KeyOf(""), KeyText("")} {
		if k.Valid() {
			t.Fatalf("%v must be invalid", k)
		}
	}
	a, b, ok := KeyPair(-7, math.MinInt32).Pair()
	if !ok || a != -7 || b != math.MinInt32 {
		t.Fatalf("Pair round trip: %d %d %v", a, b, ok)
	}
	if KeyPair(0, 1) == KeyInt(1) {
		t.Fatal("pair and bigint key spaces must differ")
	}
}

func TestLocktag(t *testing.T) {
	c, o, s := KeyInt(0x123456789abc).Locktag()
	if c != 0x1234 || o != 0x56789abc || s != 1 {
		t.Fatalf("bigint locktag %x %x %d", c, o, s)
	}
	c, o, s = KeyInt(-1).Locktag()
	if c != math.MaxUint32 || o != math.MaxUint32 || s != 1 {
		t.Fatalf("negative locktag %x %x %d", c, o, s)
	}
	c, o, s = KeyPair(-2, 3).Locktag()
	if c != uint32(0xfffffffe) || o != 3 || s != 2 {
		t.Fatalf("pair locktag %x %x %d", c, o, s)
	}
}

func TestAppendArgsAndString(t *testing.T) {
	if got := string(KeyInt(math.MinInt64).AppendArgs(nil)); got != "-9223372036854775808" {
		t.Fatal(got)
	}
	if got := string(KeyPair(-1, 2).AppendArgs([]byte("x("))); got != "x(-1,2" {
		t.Fatal(got)
	}
	if KeyPair(1, 2).String() != "advisory key (1,2)" || (Key{}).String() != "invalid advisory key" {
		t.Fatal(KeyPair(1, 2).String())
	}
}

func TestCompareIsATotalOrder(t *testing.T) {
	keys := []Key{KeyPair(1, 1), KeyInt(5), KeyInt(-5), KeyPair(-1, 0), KeyInt(5)}
	slices.SortFunc(keys, Key.Compare)
	want := []Key{KeyInt(-5), KeyInt(5), KeyInt(5), KeyPair(-1, 0), KeyPair(1, 1)}
	if !slices.Equal(keys, want) {
		t.Fatalf("sorted %v", keys)
	}
}

// TestErrorsNameTheKeyText: a key made from text (KeyOf, KeyText) is named
// by that text in String and so in every error that shows the key, beside
// the number pg_locks shows; hashing stays free of allocations.
func TestErrorsNameTheKeyText(t *testing.T) {
	for _, tc := range []struct {
		k    Key
		want string
	}{
		{KeyOf("payment:order-123"), `advisory key "payment:order-123" (5806998960378369008)`},
		{KeyText("payment:order-123"), `advisory key "payment:order-123" (hashtext -1536535568)`},
		{KeyOf("tab\there"), `advisory key "tab\there" (` + strconv.FormatInt(KeyOf("tab\there").v, 10) + `)`},
		{KeyInt(7), "advisory key 7"},
		{KeyPair(1, 2), "advisory key (1,2)"},
	} {
		if got := tc.k.String(); got != tc.want {
			t.Errorf("String() = %s, want %s", got, tc.want)
		}
		e := &Error{Op: "lock", Key: tc.k, Err: ErrTimeout}
		if got := e.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("error %q does not name %s", got, tc.want)
		}
	}
	// The same lock, whatever it was made from.
	if KeyOf("x").Compare(KeyInt(KeyOf("x").v)) != 0 {
		t.Error("a key made from text and the same number must compare equal")
	}
	s := strings.Repeat("order-", 4)
	if n := testing.AllocsPerRun(100, func() { _ = KeyOf(s); _ = KeyText(s) }); n != 0 {
		t.Errorf("KeyOf and KeyText allocate %v times", n)
	}
}
