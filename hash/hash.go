package hash

import "math/bits"

// initVal is PostgreSQL's starting state: lookup3's golden ratio plus a
// constant that hashfn.c adds to every input.
const initVal = 0x9e3779b9 + 3923095

// Text returns PostgreSQL's hashtext(s): the 32-bit hash that
// pg_advisory_lock(hashtext(s)) and hash indexes on text use.
//
// When passing the result to the bigint form of an advisory-lock function,
// sign-extend it (int64(Text(s))), as SQL does: the uint32 reinterpretation
// names a different lock.
func Text(s string) int32 {
	a, b, c := start(len(s))
	_, c = bytes(s, a, b, c)
	return int32(c)
}

// TextExtended returns PostgreSQL's hashtextextended(s, seed), the 64-bit hash
// available since PostgreSQL 11. Seed 0 gives a value whose low 32 bits equal
// uint32(Text(s)).
func TextExtended(s string, seed int64) int64 {
	a, b, c := start(len(s))
	if seed != 0 {
		a += uint32(uint64(seed) >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	b, c = bytes(s, a, b, c)
	return int64(uint64(b)<<32 | uint64(c))
}

func start(n int) (a, b, c uint32) {
	// The C code adds keylen as uint32; lengths above 4 GiB wrap the same way.
	a = initVal + uint32(n)
	return a, a, a
}

// bytes consumes s in 12-byte blocks, adds the 0–11 byte tail and runs the
// final mix, returning the two words the callers need.
func bytes(s string, a, b, c uint32) (uint32, uint32) {
	for len(s) >= 12 {
		a += le32(s[0:4])
		b += le32(s[4:8])
		c += le32(s[8:12])
		a, b, c = mix(a, b, c)
		s = s[12:]
	}
	// The tail keeps lookup3's layout: the low byte of c is reserved (for the
	// length in the original), so bytes 8–10 land at bits 8, 16 and 24.
	switch len(s) {
	case 11:
		c += uint32(s[10]) << 24
		fallthrough
	case 10:
		c += uint32(s[9]) << 16
		fallthrough
	case 9:
		c += uint32(s[8]) << 8
		fallthrough
	case 8:
		b += uint32(s[7]) << 24
		fallthrough
	case 7:
		b += uint32(s[6]) << 16
		fallthrough
	case 6:
		b += uint32(s[5]) << 8
		fallthrough
	case 5:
		b += uint32(s[4])
		fallthrough
	case 4:
		a += uint32(s[3]) << 24
		fallthrough
	case 3:
		a += uint32(s[2]) << 16
		fallthrough
	case 2:
		a += uint32(s[1]) << 8
		fallthrough
	case 1:
		a += uint32(s[0])
	}
	_, b, c = final(a, b, c)
	return b, c
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func rot(x uint32, k int) uint32 { return bits.RotateLeft32(x, k) }

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= rot(c, 4)
	c += b
	b -= a
	b ^= rot(a, 6)
	a += c
	c -= b
	c ^= rot(b, 8)
	b += a
	a -= c
	a ^= rot(c, 16)
	c += b
	b -= a
	b ^= rot(a, 19)
	a += c
	c -= b
	c ^= rot(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return a, b, c
}
