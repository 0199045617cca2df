package versioned

// Integer is every Go integer type a version can have: int, int8 … int64,
// uint, uint8 … uint64, and types defined on them (type Rev int32).
// uintptr is not a version type.
//
// For uint64 (and uint on 64-bit platforms) the largest version is
// math.MaxInt64, not math.MaxUint64: database/sql refuses to bind a uint64
// with the high bit set, and neither PostgreSQL's bigint nor SQLite's
// INTEGER could store it. A version at its type's largest value is not
// incremented: the write fails with *[OverflowError] rather than wrap
// around to a value an old reader might still hold.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}
