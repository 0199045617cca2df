package redislock_test

import "fmt"

func runChild(role string) int {
	fmt.Println("unknown role", role)
	return 2
}
