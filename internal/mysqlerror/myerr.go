// Package mysqlerror reads MySQL and MariaDB server errors without importing a
// driver: go-sql-driver/mysql's *MySQLError has the fields Number (uint16)
// and SQLState ([5]byte) and no methods, so an error is recognised by that
// shape (or by a Number() uint16 method, for other drivers).
package mysqlerror

import (
	"errors"
	"reflect"
)

// The MySQL error numbers sqlock acts on.
const (
	// LockDeadlock (ER_LOCK_DEADLOCK, SQLSTATE 40001): this transaction was
	// chosen as a deadlock victim and rolled back.
	LockDeadlock = 1213
	// LockWaitTimeout (ER_LOCK_WAIT_TIMEOUT): innodb_lock_wait_timeout ran
	// out; by default only the statement is rolled back.
	LockWaitTimeout = 1205
	// CheckRead (ER_CHECKREAD): MariaDB's snapshot isolation
	// (innodb_snapshot_isolation, the default from 11.6) found the row
	// changed since the transaction's snapshot; the transaction is rolled
	// back.
	CheckRead = 1020
)

// Number returns the error number and SQLSTATE of the first MySQL server
// error in err's chain, and whether there is one.
func Number(err error) (num uint16, sqlState string, ok bool) {
	for _, e := range chain(err) {
		if n, ok := e.(interface{ Number() uint16 }); ok {
			st := ""
			if s, ok := e.(interface{ SQLState() string }); ok {
				st = s.SQLState()
			}
			return n.Number(), st, true
		}
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		nf, sf := v.FieldByName("Number"), v.FieldByName("SQLState")
		if !nf.IsValid() || nf.Kind() != reflect.Uint16 || !sf.IsValid() ||
			sf.Kind() != reflect.Array || sf.Len() != 5 || sf.Type().Elem().Kind() != reflect.Uint8 {
			continue
		}
		var st [5]byte
		for i := range st {
			st[i] = byte(sf.Index(i).Uint())
		}
		if st != [5]byte{} {
			sqlState = string(st[:])
		}
		return uint16(nf.Uint()), sqlState, true
	}
	return 0, "", false
}

// chain lists err and every error it wraps, depth first, as errors.As
// visits them.
func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			out = append(out, e)
			switch u := e.(type) {
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					walk(x)
				}
				return
			default:
				e = errors.Unwrap(e)
			}
		}
	}
	walk(err)
	return out
}
