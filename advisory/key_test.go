package advisory

import (
	"math"
	"slices"
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
