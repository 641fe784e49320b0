package auth_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// setup opens a store in a temporary folder and an authenticator over it with a fake clock
// and seeded randomness.
func setup(t *testing.T) (*auth.Authenticator, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := auth.New(auth.Options{Store: st, Clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		Rand: rand.NewChaCha8([32]byte{1})})
	return a, st
}

func TestCreateVerifyRevoke(t *testing.T) {
	t.Parallel()
	a, st := setup(t)
	ctx := context.Background()
	scope := auth.Scope{Queues: []string{"mail"}, Types: []string{"email.*"}}
	token, rec, err := a.Create(ctx, auth.CreateParams{Name: "mailer", Role: auth.RoleWorker, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, "jw_"+rec.ID+"_") || len(token) != 3+16+1+43 {
		t.Fatalf("token %q does not have the form jw_<id>_<secret> with id %s", token, rec.ID)
	}
	p, err := a.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if p.TokenID != rec.ID || p.Role != auth.RoleWorker || p.Name != "mailer" || !p.Scope.AllowsType("email.send") || p.Scope.AllowsQueue("other") {
		t.Fatalf("principal %+v does not match the token created", p)
	}
	list, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != rec.ID || list[0].Role != auth.RoleWorker || list[0].Scope.Types[0] != "email.*" {
		t.Fatalf("list = %+v", list)
	}
	// The store keeps a hash of the token, never the token.
	if recs, err := st.TokenList(ctx); err != nil || len(recs) != 1 || strings.Contains(string(recs[0].Hash), token) {
		t.Fatalf("stored tokens = %+v, %v", recs, err)
	}
	for _, bad := range []string{"", token + "x", token[:len(token)-1], "jw_" + rec.ID + "_" + strings.Repeat("A", 43)} {
		if _, err := a.Verify(ctx, bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("Verify(%q) = %v, want ErrUnauthenticated", bad, err)
		}
	}
	// A stream opened with the token ends when it is revoked; the token is refused at once,
	// although it was cached.
	streamCtx, release := a.Track(ctx, p)
	defer release()
	if _, err := a.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Verify after revoke = %v, want ErrUnauthenticated", err)
	}
	<-streamCtx.Done()
	if !errors.Is(context.Cause(streamCtx), auth.ErrRevoked) {
		t.Fatalf("stream cause = %v, want ErrRevoked", context.Cause(streamCtx))
	}
	if _, err := a.Revoke(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke unknown = %v, want ErrNotFound", err)
	}
	// Another authenticator over the same database (a restarted broker) refuses it too.
	b := auth.New(auth.Options{Store: st})
	if _, err := b.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Verify of a revoked token after restart = %v", err)
	}
}

func TestCreateValidates(t *testing.T) {
	t.Parallel()
	a, _ := setup(t)
	for name, p := range map[string]auth.CreateParams{
		"no role":        {},
		"scoped admin":   {Role: auth.RoleAdmin, Scope: auth.Scope{Queues: []string{"q"}}},
		"scoped viewer":  {Role: auth.RoleViewer, Scope: auth.Scope{Types: []string{"t"}}},
		"empty pattern":  {Role: auth.RoleWorker, Scope: auth.Scope{Types: []string{""}}},
		"comma pattern":  {Role: auth.RoleWorker, Scope: auth.Scope{Types: []string{"a,b"}}},
		"too many names": {Role: auth.RoleProducer, Scope: auth.Scope{Queues: make([]string, auth.MaxPatterns+1)}},
	} {
		if _, _, err := a.Create(context.Background(), p); err == nil {
			t.Errorf("%s: Create accepted %+v", name, p)
		}
	}
}

func TestBootstrapWritesFileOnce(t *testing.T) {
	t.Parallel()
	a, _ := setup(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "admin.token")
	res, err := a.Bootstrap(ctx, auth.BootstrapOptions{File: file})
	if err != nil || !res.Created || res.File != file {
		t.Fatalf("Bootstrap = %+v, %v", res, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(file)
	p, err := a.Verify(ctx, strings.TrimSpace(string(data)))
	if err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("the written token verifies as %+v, %v", p, err)
	}
	// Tokens exist now: a second start, even with a token in the environment, adds nothing.
	res, err = a.Bootstrap(ctx, auth.BootstrapOptions{Token: strings.Repeat("x", 40), File: file})
	if err != nil || res.Created {
		t.Fatalf("second Bootstrap = %+v, %v; want nothing done", res, err)
	}
	if _, err := a.Verify(ctx, strings.Repeat("x", 40)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("an environment token was planted after bootstrap: %v", err)
	}
}

func TestBootstrapFromEnvironmentToken(t *testing.T) {
	t.Parallel()
	a, _ := setup(t)
	ctx := context.Background()
	if _, err := a.Bootstrap(ctx, auth.BootstrapOptions{Token: "short"}); err == nil {
		t.Fatal("a 5-character bootstrap token was accepted")
	}
	given := "operator-chosen-secret-0123456789abcdef"
	res, err := a.Bootstrap(ctx, auth.BootstrapOptions{Token: given, File: filepath.Join(t.TempDir(), "unused")})
	if err != nil || !res.Created || res.File != "" {
		t.Fatalf("Bootstrap = %+v, %v", res, err)
	}
	if p, err := a.Verify(ctx, given); err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("Verify(given) = %+v, %v", p, err)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"email.send", "email.send", true},
		{"email.send", "email.sender", false},
		{"email.*", "email.send", true},
		{"email.*", "email.bulk.send", true},
		{"email.*", "email.", true},
		{"email.*", "email", false},
		{"email.*", "xemail.send", false},
		{"*", "", true},
		{"*", "anything", true},
		{"*.send", "sms.send", true},
		{"*.send", "sms.sender", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"ab*bc", "abc", false},
		{"a*a", "a", false},
	} {
		if got := auth.Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "Basic abc": "", "Bearer": "", "Bearer ": ""} {
		got, ok := auth.BearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v", header, got, ok)
		}
	}
}

// staleStore answers token reads as they were before any revocation, as a read that raced
// one would.
type staleStore struct{ *sqlite.Store }

func (s staleStore) TokenGetByHash(ctx context.Context, hash []byte) (*store.TokenRecord, error) {
	r, err := s.Store.TokenGetByHash(ctx, hash)
	if r != nil {
		r.RevokedAt = time.Time{}
	}
	return r, err
}

// TestRevocationBeatsRacingReads: a verification whose storage read raced a revocation, and a
// stream registered after it, do not outlive the revocation.
func TestRevocationBeatsRacingReads(t *testing.T) {
	t.Parallel()
	_, st := setup(t)
	a := auth.New(auth.Options{Store: staleStore{st}})
	ctx := context.Background()
	token, rec, err := a.Create(ctx, auth.CreateParams{Role: auth.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(ctx, token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Verify after revoke with a stale read = %v, want ErrUnauthenticated", err)
	}
	streamCtx, release := a.Track(ctx, p)
	defer release()
	if !errors.Is(context.Cause(streamCtx), auth.ErrRevoked) {
		t.Fatalf("a stream tracked after its token's revocation is not ended: cause %v", context.Cause(streamCtx))
	}
}
