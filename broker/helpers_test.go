package broker

import (
	"context"
	"testing"
	"time"
)

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
