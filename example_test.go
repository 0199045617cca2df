package sqlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
)

// A nil handle is refused by every package with an error that matches
// sqlock.ErrNilHandle, before anything is sent.
func Example() {
	err := advisory.New(nil).Do(context.Background(), advisory.KeyOf("job:1"), func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, sqlock.ErrNilHandle))
	// Output: true
}
