package mysqlerror_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlock/sqlock/internal/mysqlerror"
)

type numbered struct{ n uint16 }

func (e numbered) Error() string     { return "numbered" }
func (e numbered) Number() uint16    { return e.n }
func (e numbered) SQLState() string  { return "40001" }
func (e *lookalike) Error() string   { return "lookalike" }
func (e notMySQL) Error() string     { return "not mysql" }
func (e *wrongState) Error() string  { return "wrong state" }
func (e *wrongNumber) Error() string { return "wrong number" }
func (e multi) Error() string        { return "multi" }
func (e multi) Unwrap() []error      { return e }

type (
	lookalike struct {
		Number   uint16
		SQLState [5]byte
	}
	notMySQL   struct{ Code string }
	wrongState struct {
		Number   uint16
		SQLState string
	}
	wrongNumber struct {
		Number   int
		SQLState [5]byte
	}
	multi []error
)

// TestNumberReadsTheDriversErrorByItsShape: go-sql-driver/mysql's
// *MySQLError (and a look-alike of the same shape, or a Number() method) is
// found anywhere in a chain, through fmt.Errorf wrapping and errors.Join;
// errors of another shape are not.
func TestNumberReadsTheDriversErrorByItsShape(t *testing.T) {
	deadlock := &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock found"}
	for _, c := range []struct {
		err   error
		num   uint16
		state string
		ok    bool
	}{
		{deadlock, 1213, "40001", true},
		{fmt.Errorf("versioned: update t: %w", deadlock), 1213, "40001", true},
		{errors.Join(errors.New("x"), fmt.Errorf("y: %w", deadlock)), 1213, "40001", true},
		{multi{notMySQL{}, &lookalike{Number: 1205}}, 1205, "", true},
		{numbered{1020}, 1020, "40001", true},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout"}, 1205, "", true},
		{notMySQL{Code: "1213"}, 0, "", false},
		{&wrongState{Number: 1213, SQLState: "40001"}, 0, "", false},
		{&wrongNumber{Number: 1213}, 0, "", false},
		{(*lookalike)(nil), 0, "", false},
		{nil, 0, "", false},
	} {
		num, state, ok := mysqlerror.Number(c.err)
		if num != c.num || state != c.state || ok != c.ok {
			t.Errorf("Number(%#v) = %d, %q, %v; want %d, %q, %v", c.err, num, state, ok, c.num, c.state, c.ok)
		}
	}
}
