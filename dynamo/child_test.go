package dynamo_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/dynamo"
	"github.com/sqlock/sqlock/dynamo/internal/dynamotest"
	"github.com/sqlock/sqlock/versioned"
)

// childEnv makes the test binary a lock holder process (runChild) instead
// of running tests; its value is "endpoint locktable datatable".
const childEnv = "DYNAMO_TEST_CHILD"

// runChild holds the lock "job" (TTL 1 s) and prints its token; when its
// stdin sends a line it writes the register under the lock's Context and
// releases, and prints what each said: "lost=… fenced=… notheld=…".
func runChild(target string) int {
	f := strings.Fields(target)
	c := dynamodb.New(dynamotest.ClientOptions(f[0]))
	ctx := context.Background()
	l, err := dynamo.NewLocker(c, f[1]).Acquire(ctx, "job", time.Second)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	lost := errors.Is(l.Err(), sqlock.ErrLost)
	lctx, cancel := l.Context(ctx)
	defer cancel()
	werr := dynamo.NewTable(c, f[2], "id").UpdateFenced(sqlock.WithFencingToken(ctx, l.Token()), dynamo.Key{"reg"}, dynamo.Set("v", "late"))
	rerr := l.Release(ctx)
	fmt.Printf("lost=%v ctxdone=%v fenced=%v notheld=%v\n", lost, lctx.Err() != nil,
		errors.Is(werr, versioned.ErrFenced), errors.Is(rerr, dynamo.ErrNotHeld))
	return 0
}

// TestPausedHolderIsTakenOverAndFencedOut: a holder process paused
// (SIGSTOP) past its TTL stops renewing; another Locker, having watched the
// record version unchanged for the TTL, takes the lock over with a larger
// token and writes the register; the holder, resumed, reports the loss, its
// late fenced write is refused by DynamoDB (versioned.ErrFenced) and its
// release is ErrNotHeld; the register keeps the new holder's value.
func TestPausedHolderIsTakenOverAndFencedOut(t *testing.T) {
	srv := dynamotest.Shared(t)
	c := srv.Client(nil)
	table := lockTable(t, c)
	data := dynamo.NewTable(c, itemTable(t, c), "id")
	put(t, c, data.Name(), map[string]types.AttributeValue{"id": s("reg")})

	// The holder is killed if the test's context ends first: every read
	// of its output below then ends.
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+srv.Endpoint+" "+table+" "+data.Name())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		cmd.Wait()
	}()
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		t.Fatalf("holder said nothing: %v", out.Err())
	}
	line := out.Text()
	old, err := strconv.ParseInt(strings.TrimPrefix(line, "token "), 10, 64)
	if err != nil {
		t.Fatalf("holder: %s", line)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l, err := dynamo.NewLocker(c, table, dynamo.WithTimeout(time.Minute)).Acquire(testCtx(t), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if l.Token() <= old {
		t.Fatalf("new holder's token %d, the paused one's %d", l.Token(), old)
	}
	lctx, cancel := l.Context(t.Context())
	defer cancel()
	if err := data.UpdateFenced(lctx, dynamo.Key{"reg"}, dynamo.Set("v", "new")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	if !out.Scan() {
		t.Fatalf("holder said nothing after the resume: %v", out.Err())
	}
	if got, want := out.Text(), "lost=true ctxdone=true fenced=true notheld=true"; got != want {
		t.Fatalf("resumed holder: %s; want %s", got, want)
	}
	if str(get(t, c, data.Name(), "reg"), "v") != "new" || l.Err() != nil {
		t.Fatalf("register %v, new holder %v", get(t, c, data.Name(), "reg"), l.Err())
	}
}
