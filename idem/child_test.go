package idem_test

import (
	"fmt"
)

// Worker processes: the test binary run again with childEnv set to a role.
func runChild(role string) int {
	switch role {
	}
	fmt.Println("unknown role", role)
	return 2
}
