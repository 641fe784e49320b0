package broker

import (
	"context"
	"os"
	"testing"
	"time"
)

// testCommit is the writer this package's brokers run on: group commit, or its reference,
// one operation per transaction, with JOBWIRE_TEST_COMMIT=one-by-one (as brokertest.EnvCommit
// does for the brokers it starts).
var testCommit = func() Commit {
	if os.Getenv("JOBWIRE_TEST_COMMIT") == OneByOne.String() {
		return OneByOne
	}
	return GroupCommit
}()

// onlyGroupCommit skips a test of what group commit alone does when the package's brokers run
// on the reference writer.
func onlyGroupCommit(t *testing.T) {
	t.Helper()
	if testCommit != GroupCommit {
		t.Skip("a property of group commit: the reference writer commits one operation at a time")
	}
}

// startForTest starts b and, when t ends, shuts it down, then closes its store with
// closeStore.
func startForTest(t testing.TB, b *Broker, closeStore func() error) {
	t.Helper()
	ctx := context.Background()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = b.Shutdown(sctx)
		_ = closeStore()
	})
}
