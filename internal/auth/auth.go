// Package auth decides who a caller is: it turns a bearer token into a Principal (a role and a
// scope) and keeps the tokens, of which the database holds only a hash.
//
// The broker's gRPC server checks every call through an Authenticator; other listeners (the
// HTTP dashboard) use Verify the same way:
//
//	p, err := a.Verify(ctx, token)
//	if errors.Is(err, auth.ErrUnauthenticated) { ... 401 ... }
//	if !p.Role.Includes(auth.RoleViewer) { ... 403 ... }
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
)

// ErrUnauthenticated is returned by Verify for a missing, malformed, unknown or revoked token.
// The cause is deliberately not told apart: a caller probing tokens learns nothing.
var ErrUnauthenticated = errors.New("missing, unknown or revoked token")

// ErrNotFound is matched by Revoke's error for an id no token has. It is the store's own
// value, so errors.Is matches it in an error from any layer.
var ErrNotFound = store.ErrNotFound

// ErrRevoked is the cause of a context that Track cancels when its token is revoked.
var ErrRevoked = errors.New("the token was revoked")

// Principal is an authenticated caller.
type Principal struct {
	// TokenID is the token's public accessor, safe to log.
	TokenID string
	Name    string
	Role    Role
	Scope   Scope
}

// Includes reports whether a token of role r may do what role need may: admin includes every
// role; viewer, producer and worker only themselves.
func (r Role) Includes(need Role) bool { return r == RoleAdmin || r == need }

// Store is what the authenticator needs of storage.
type Store interface {
	Write(ctx context.Context, op string, fn func(tx store.Tx) error) error
	TokenGetByHash(ctx context.Context, hash []byte) (*store.TokenRecord, error)
	TokenList(ctx context.Context) ([]store.TokenRecord, error)
}

// Options configure an Authenticator.
type Options struct {
	Store  Store
	Clock  clock.Clock  // nil: the real clock
	Rand   io.Reader    // token secrets; nil: crypto/rand
	Logger *slog.Logger // nil: slog.Default()
	// Audit, when set, is called in the transaction that creates or revokes a token, with the
	// token as it is after (RevokedAt zero for one created), to record who did it.
	Audit func(ctx context.Context, tx store.Tx, t store.TokenRecord) error
	// Cache and Failures tune how long verifications are remembered and how many failed ones
	// one client may cause (cache.go, throttle.go); zero fields take the defaults.
	Cache    CacheOptions
	Failures FailureOptions
}

// Authenticator verifies tokens and manages them. It caches verified tokens for a short
// lifetime (CacheOptions.TTL); revoking through it drops the token from the cache at once, so
// a revocation holds for the next call, and the other brokers of a cluster drop it when they
// hear of it (ClusterEvent). It is safe for concurrent use.
type Authenticator struct {
	st    Store
	clk   clock.Clock
	rand  io.Reader
	log   *slog.Logger
	ttl   CacheOptions
	fails *failures
	// audit records token changes in their transaction (Options.Audit).
	audit func(ctx context.Context, tx store.Tx, t store.TokenRecord) error

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cached
	// refused remembers, until the time each maps to, the hashes of tokens just found unknown
	// or revoked, so that a client repeating one costs no storage read.
	refused map[[sha256.Size]byte]time.Time
	streams map[string]map[*tracked]struct{} // by token id
	// revoked holds the ids revoked through this Authenticator. A Verify whose storage read
	// raced a revocation, or a stream registered just after one, checks it, so neither can
	// outlive the revocation.
	revoked map[string]struct{}
}

type tracked struct{ cancel context.CancelCauseFunc }

// New returns an Authenticator over opts.Store.
func New(opts Options) *Authenticator {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Audit == nil {
		opts.Audit = func(context.Context, store.Tx, store.TokenRecord) error { return nil }
	}
	return &Authenticator{st: opts.Store, clk: opts.Clock, rand: opts.Rand, log: opts.Logger, audit: opts.Audit,
		ttl: opts.Cache.withDefaults(), fails: newFailures(opts.Failures.withDefaults()),
		cache: map[[sha256.Size]byte]cached{}, refused: map[[sha256.Size]byte]time.Time{},
		streams: map[string]map[*tracked]struct{}{}, revoked: map[string]struct{}{}}
}

// hashToken is what the store keeps of a token: tokens carry 256 random bits, so a plain,
// fast hash is enough, and looking the hash up in an index leaks nothing useful about the
// secret through timing.
func hashToken(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// Verify returns the principal of a bearer token, or ErrUnauthenticated. Other errors are
// storage failures.
func (a *Authenticator) Verify(ctx context.Context, token string) (Principal, error) {
	return a.VerifyFrom(ctx, "", token)
}

// VerifyFrom is Verify for a call from the client at address peer (an IP address, without a
// port): a token this Authenticator has not verified before, nor refused lately, is looked up
// only while that client has failed fewer authentications than FailureOptions allow, else the
// answer is a *ThrottledError (matching ErrThrottled). An empty peer is not throttled.
func (a *Authenticator) VerifyFrom(ctx context.Context, peer, token string) (Principal, error) {
	if token == "" || len(token) > maxTokenLen {
		return Principal{}, ErrUnauthenticated
	}
	h := hashToken(token)
	now := a.clk.Now()
	p, known := a.cached(h, now)
	switch {
	case known == verified:
		return p, nil
	case known == refused:
		return Principal{}, ErrUnauthenticated
	case known == unknown:
		if wait := a.fails.wait(peer, now); wait > 0 {
			return Principal{}, &ThrottledError{Peer: peer, RetryAfter: wait}
		}
	}
	r, err := a.st.TokenGetByHash(ctx, h[:])
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && !r.RevokedAt.IsZero():
		a.refuse(h, now)
		a.fails.charge(peer, now)
		return Principal{}, ErrUnauthenticated
	case err != nil:
		return Principal{}, fmt.Errorf("read token: %w", err)
	}
	p, err = principalOf(r)
	if err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, gone := a.revoked[p.TokenID]; gone {
		return Principal{}, ErrUnauthenticated
	}
	a.remember(h, p, now)
	return p, nil
}

func principalOf(r *store.TokenRecord) (Principal, error) {
	role, err := ParseRole(r.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("token %s: %w", r.ID, err)
	}
	return Principal{TokenID: r.ID, Name: r.Name, Role: role, Scope: Scope{Queues: r.Queues, Types: r.Types}}, nil
}

// Token is what an operator may see of a token: never its secret, nor the hash kept of it.
type Token struct {
	// ID is the token's public accessor, safe to log.
	ID        string
	Name      string
	Role      Role // zero when the stored role is not one this broker knows
	Scope     Scope
	CreatedAt time.Time
	RevokedAt time.Time // zero while the token is valid
}

func tokenOf(r store.TokenRecord) Token {
	role, _ := ParseRole(r.Role)
	return Token{ID: r.ID, Name: r.Name, Role: role, Scope: Scope{Queues: r.Queues, Types: r.Types},
		CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt}
}

// maxTokenLen bounds what Verify hashes; tokens made here are 70 characters.
const maxTokenLen = 512

// MinBootstrapTokenLen is the shortest operator-supplied bootstrap token accepted.
const MinBootstrapTokenLen = 32

// CreateParams describe a new token.
type CreateParams struct {
	Name  string
	Role  Role
	Scope Scope
}

// Validate checks the parameters of a new token.
func (p CreateParams) Validate() error {
	if _, ok := roleNames[p.Role]; !ok {
		return errors.New("role must be producer, worker, viewer or admin")
	}
	if len(p.Name) > MaxPatternLen {
		return fmt.Errorf("name must be at most %d characters, got %d", MaxPatternLen, len(p.Name))
	}
	if !p.Role.Scoped() && !p.Scope.Unrestricted() {
		return fmt.Errorf("%s tokens see every queue and job type: queue and type scopes apply only to producer and worker tokens", p.Role)
	}
	if err := ValidatePatterns("queues", p.Scope.Queues); err != nil {
		return err
	}
	return ValidatePatterns("types", p.Scope.Types)
}

// Create makes a token and stores its hash. The token is returned once and cannot be read
// back later.
func (a *Authenticator) Create(ctx context.Context, p CreateParams) (string, Token, error) {
	if err := p.Validate(); err != nil {
		return "", Token{}, err
	}
	token, rec, err := a.newToken(p, "")
	if err != nil {
		return "", Token{}, err
	}
	err = a.st.Write(ctx, "token_create", func(tx store.Tx) error {
		if err := tx.TokenInsert(&rec); err != nil {
			return err
		}
		return a.audit(ctx, tx, rec)
	})
	if err != nil {
		return "", Token{}, err
	}
	a.log.InfoContext(ctx, "token created", "token_id", rec.ID, "role", rec.Role, "name", rec.Name)
	return token, tokenOf(rec), nil
}

// newToken draws a token jw_<id>_<secret>: a 64-bit public id and a 256-bit secret. A token
// given by the operator (bootstrap) is used as it is, with a fresh id.
func (a *Authenticator) newToken(p CreateParams, given string) (string, store.TokenRecord, error) {
	var b [8 + 32]byte
	if _, err := io.ReadFull(a.rand, b[:]); err != nil {
		return "", store.TokenRecord{}, fmt.Errorf("draw token: %w", err)
	}
	id := hex.EncodeToString(b[:8])
	token := given
	if token == "" {
		token = "jw_" + id + "_" + base64.RawURLEncoding.EncodeToString(b[8:])
	}
	h := hashToken(token)
	rec := store.TokenRecord{ID: id, Name: p.Name, Hash: h[:], Role: p.Role.String(),
		Queues: p.Scope.Queues, Types: p.Scope.Types, CreatedAt: a.clk.Now()}
	return token, rec, nil
}

// List returns every token, revoked ones included, oldest first.
func (a *Authenticator) List(ctx context.Context) ([]Token, error) {
	recs, err := a.st.TokenList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Token, len(recs))
	for i, r := range recs {
		out[i] = tokenOf(r)
	}
	return out, nil
}

// Revoke revokes the token with id: calls that present it are refused from now on, and the
// worker streams it opened are ended (see Track). The revocation is published to the other
// brokers of a cluster, which do the same as they hear of it (ClusterEvent). It returns
// ErrNotFound for an unknown id.
func (a *Authenticator) Revoke(ctx context.Context, id string) (Token, error) {
	var rec *store.TokenRecord
	err := a.st.Write(ctx, "token_revoke", func(tx store.Tx) error {
		var err error
		if rec, err = tx.TokenRevoke(id, a.clk.Now()); err != nil {
			return err
		}
		tx.Publish(store.Event{Kind: store.EventTokenRevoked, Key: id})
		return a.audit(ctx, tx, *rec)
	})
	if err != nil {
		return Token{}, err
	}
	n := a.forget(id)
	a.log.InfoContext(ctx, "token revoked", "token_id", id, "streams_closed", n)
	return tokenOf(*rec), nil
}

// Track ties a long-lived call (a worker stream) to its token: the returned context is
// cancelled with cause ErrRevoked when the token is revoked. Call release when the call ends.
func (a *Authenticator) Track(ctx context.Context, p Principal) (_ context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := &tracked{cancel: cancel}
	a.mu.Lock()
	if _, gone := a.revoked[p.TokenID]; gone {
		a.mu.Unlock()
		cancel(ErrRevoked)
		return ctx, func() {}
	}
	if a.streams[p.TokenID] == nil {
		a.streams[p.TokenID] = map[*tracked]struct{}{}
	}
	a.streams[p.TokenID][t] = struct{}{}
	a.mu.Unlock()
	return ctx, func() {
		a.mu.Lock()
		delete(a.streams[p.TokenID], t)
		if len(a.streams[p.TokenID]) == 0 {
			delete(a.streams, p.TokenID)
		}
		a.mu.Unlock()
		cancel(nil)
	}
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries; ok is false when auth is off.
func PrincipalFrom(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// BearerToken extracts the token from an Authorization header value "Bearer <token>".
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}
