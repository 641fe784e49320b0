package auth_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// countingStore counts the token lookups that reach storage.
type countingStore struct {
	*sqlite.Store
	lookups atomic.Int64
}

func (s *countingStore) TokenGetByHash(ctx context.Context, hash []byte) (*store.TokenRecord, error) {
	s.lookups.Add(1)
	return s.Store.TokenGetByHash(ctx, hash)
}

// setupClock is setup with the fake clock and the count of storage lookups at hand.
func setupClock(t *testing.T, opts auth.Options) (*auth.Authenticator, *countingStore, *clock.Fake) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cs := &countingStore{Store: st}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts.Store, opts.Clock, opts.Rand = cs, clk, rand.NewChaCha8([32]byte{1})
	return auth.New(opts), cs, clk
}

// revokeElsewhere revokes id in storage as another broker would, without telling a.
func revokeElsewhere(t *testing.T, st *countingStore, id string) {
	t.Helper()
	err := st.Write(context.Background(), "token_revoke", func(tx store.Tx) error {
		_, err := tx.TokenRevoke(id, time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A token revoked by another broker whose revocation this one never hears of is refused once
// the cache lifetime has passed: a verified token is not trusted for longer.
func TestCachedTokenExpires(t *testing.T) {
	t.Parallel()
	a, st, clk := setupClock(t, auth.Options{Cache: auth.CacheOptions{TTL: 3 * time.Second}})
	ctx := context.Background()
	token, rec, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(ctx, token); err != nil {
		t.Fatal(err)
	}
	revokeElsewhere(t, st, rec.ID)
	clk.Advance(3*time.Second - time.Nanosecond)
	if _, err := a.Verify(ctx, token); err != nil {
		t.Fatalf("within the cache lifetime: %v, want the cached principal", err)
	}
	clk.Advance(time.Nanosecond)
	if _, err := a.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after the cache lifetime: %v, want ErrUnauthenticated", err)
	}
}

// A revocation event from another broker refuses the token at once and ends its streams.
func TestRevocationEventEndsStreams(t *testing.T) {
	t.Parallel()
	a, st, _ := setupClock(t, auth.Options{})
	ctx := context.Background()
	token, rec, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	streamCtx, release := a.Track(ctx, p)
	defer release()
	revokeElsewhere(t, st, rec.ID)
	a.ClusterEvent(store.Event{Kind: store.EventTokenRevoked, Key: rec.ID, From: "2"})
	if _, err := a.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after the event: %v, want ErrUnauthenticated", err)
	}
	<-streamCtx.Done()
	if !errors.Is(context.Cause(streamCtx), auth.ErrRevoked) {
		t.Fatalf("stream cause = %v, want ErrRevoked", context.Cause(streamCtx))
	}
}

// After a gap in the cluster's events, when a revocation may have been missed, the cache is
// emptied and the open streams' tokens are read again.
func TestResyncFlushesCacheAndRechecksStreams(t *testing.T) {
	t.Parallel()
	a, st, _ := setupClock(t, auth.Options{})
	ctx := context.Background()
	token, rec, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	kept, _, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := a.Verify(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	streamCtx, release := a.Track(ctx, p)
	defer release()
	keptCtx, releaseKept := a.Track(ctx, pk)
	defer releaseKept()
	revokeElsewhere(t, st, rec.ID) // its event is lost
	a.ClusterEvent(store.Event{Kind: store.EventResync, From: "1"})
	if _, err := a.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after a resync: %v, want ErrUnauthenticated", err)
	}
	select {
	case <-streamCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stream of the token revoked unheard of did not end after a resync")
	}
	if keptCtx.Err() != nil {
		t.Fatalf("the stream of a valid token ended: %v", context.Cause(keptCtx))
	}
}

// An unknown token presented again is refused from the cache of refused tokens, without a
// storage read, until that entry's lifetime passes.
func TestRefusedTokenIsCached(t *testing.T) {
	t.Parallel()
	a, st, clk := setupClock(t, auth.Options{Cache: auth.CacheOptions{RefusedTTL: 2 * time.Second}})
	ctx := context.Background()
	bad := "jw_0000000000000000_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for range 3 {
		if _, err := a.Verify(ctx, bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("Verify(unknown) = %v", err)
		}
	}
	if n := st.lookups.Load(); n != 1 {
		t.Fatalf("three verifications of one unknown token read storage %d times, want once", n)
	}
	clk.Advance(2 * time.Second)
	if _, err := a.Verify(ctx, bad); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Verify(unknown) = %v", err)
	}
	if n := st.lookups.Load(); n != 2 {
		t.Fatalf("after the refused entry's lifetime storage was read %d times, want twice", n)
	}
	// A token created meanwhile is accepted at once: nobody can have presented it before.
	token, _, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(ctx, token); err != nil {
		t.Fatalf("a new token: %v", err)
	}
}

// A client that fails authentication Burst times is refused without a storage read until its
// bucket refills at Rate; other clients, and tokens the broker has cached, are not held back.
func TestFailedAuthenticationsThrottledPerClient(t *testing.T) {
	t.Parallel()
	a, st, clk := setupClock(t, auth.Options{Failures: auth.FailureOptions{Rate: 2, Burst: 3}})
	ctx := context.Background()
	good, _, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.VerifyFrom(ctx, "192.0.2.7", good); err != nil {
		t.Fatal(err)
	}
	guess := func(i int) string {
		return "jw_00000000000000" + string(rune('a'+i/26)) + string(rune('a'+i%26)) + "_guess"
	}
	for i := range 3 {
		if _, err := a.VerifyFrom(ctx, "192.0.2.7", guess(i)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("guess %d: %v, want ErrUnauthenticated", i, err)
		}
	}
	before := st.lookups.Load()
	_, err = a.VerifyFrom(ctx, "192.0.2.7", guess(3))
	var th *auth.ThrottledError
	if !errors.As(err, &th) || !errors.Is(err, auth.ErrThrottled) || th.RetryAfter != 500*time.Millisecond {
		t.Fatalf("a fourth guess: %v, want a ThrottledError asking to retry in 500ms", err)
	}
	if n := st.lookups.Load(); n != before {
		t.Fatalf("a throttled guess read storage (%d lookups, want %d)", n, before)
	}
	if _, err := a.VerifyFrom(ctx, "192.0.2.7", good); err != nil {
		t.Fatalf("a cached token from the throttled client: %v", err)
	}
	if _, err := a.VerifyFrom(ctx, "198.51.100.1", guess(4)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("another client: %v, want ErrUnauthenticated, not throttled", err)
	}
	// IPv6 clients are told apart by their /64 network.
	for i := range 3 {
		_, _ = a.VerifyFrom(ctx, "2001:db8::"+string(rune('1'+i)), guess(10+i))
	}
	if _, err := a.VerifyFrom(ctx, "2001:db8::ff", guess(20)); !errors.Is(err, auth.ErrThrottled) {
		t.Fatalf("an address of a throttled /64: %v, want ErrThrottled", err)
	}
	// The cached token, read again once its cache lifetime is over, is not taken for a guess.
	clk.Advance(auth.DefaultCacheTTL)
	for i := range 30 { // the bucket has refilled: empty it again
		_, _ = a.VerifyFrom(ctx, "192.0.2.7", guess(30+i))
	}
	reads := st.lookups.Load()
	if _, err := a.VerifyFrom(ctx, "192.0.2.7", good); err != nil || st.lookups.Load() != reads+1 {
		t.Fatalf("a token verified before, read again from a throttled client: %v (%d reads, want 1)", err, st.lookups.Load()-reads)
	}
	clk.Advance(500 * time.Millisecond)
	if _, err := a.VerifyFrom(ctx, "192.0.2.7", guess(5)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after the wait: %v, want the guess looked up and refused", err)
	}
	if _, err := a.VerifyFrom(ctx, "192.0.2.7", guess(6)); !errors.Is(err, auth.ErrThrottled) {
		t.Fatalf("right after: %v, want ErrThrottled", err)
	}
}
