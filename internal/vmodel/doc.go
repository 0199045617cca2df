// Package vmodel is what every versioned adapter shares about a row:
// the lock:"…" struct tags ([ParseTag], and [Tags], the rules a struct's
// tags must keep, which package versioned and sqlxhelpers apply through
// [Of] and gormplugin over GORM's schema), integer version types ([Int]),
// key values, quoting, the shape of a versioned statement ([Stmt]), and the
// errors package versioned re-exports under the same names, so that
// errors.Is and errors.As work whichever package returned them.
package vmodel
