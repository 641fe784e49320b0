package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/internal/auth"
)

// Role is what an authenticated caller of the HTTP listener may do.
type Role int

const (
	// RoleNone may do nothing.
	RoleNone Role = iota
	// RoleViewer may read everything and change nothing.
	RoleViewer
	// RoleAdmin may also pause queues, requeue and purge dead jobs, cancel jobs and steer
	// breakers.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// Authenticator checks a bearer token presented to the HTTP listener and says which role it
// carries. It is the broker's token verification, adapted; the listener keeps no tokens of its
// own. Errors for unknown, revoked or expired tokens should match ErrBadToken.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Role, error)
}

// ErrBadToken is what an Authenticator returns for a token that is not valid.
var ErrBadToken = errors.New("token is not valid")

// cookieName holds the dashboard's token after login.
const cookieName = "jobwire_token"

// authn applies an Authenticator to requests; with none, everyone is an admin.
type authn struct {
	auth Authenticator
	log  *slog.Logger
}

type roleKey struct{}

// roleOf is the role the request was authenticated with (RoleAdmin when authentication is off).
func roleOf(ctx context.Context) Role {
	r, _ := ctx.Value(roleKey{}).(Role)
	return r
}

// token is the request's bearer token, from the Authorization header or the login cookie.
func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	return ""
}

// roleFor authenticates r.
func (a *authn) roleFor(r *http.Request) Role {
	role, _ := a.authenticate(r)
	return role
}

// authenticate authenticates r; wait is set when r's client failed too many authentications
// lately and its token was not looked at.
func (a *authn) authenticate(r *http.Request) (role Role, wait time.Duration) {
	if a.auth == nil {
		return RoleAdmin, 0
	}
	t := token(r)
	if t == "" {
		return RoleNone, 0
	}
	role, err := a.auth.Authenticate(withClient(r), t)
	var throttled *auth.ThrottledError
	switch {
	case errors.As(err, &throttled):
		return RoleNone, throttled.RetryAfter
	case err != nil:
		if !errors.Is(err, ErrBadToken) {
			a.log.Warn("http: token check failed", "err", err)
		}
		return RoleNone, 0
	}
	return role, 0
}

type clientKey struct{}

// withClient is r's context carrying the client's IP address, which failed authentications
// are counted against (auth.FailureOptions).
func withClient(r *http.Request) context.Context {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return context.WithValue(r.Context(), clientKey{}, host)
}

// tooMany answers a client whose failed authentications are throttled.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	http.Error(w, fmt.Sprintf("too many failed authentications from this address; retry in %s", wait), http.StatusTooManyRequests)
}

// require answers 401 without a valid token and 403 when its role is below min.
func (a *authn) require(min Role, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role, wait := a.authenticate(r)
		switch {
		case wait > 0:
			tooMany(w, wait)
			return
		case role == RoleNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="jobwire"`)
			http.Error(w, "a viewer or admin token is required", http.StatusUnauthorized)
			return
		case role < min:
			http.Error(w, "this needs an admin token", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
	})
}

// tokenAuth adapts the broker's API tokens to the HTTP listener.
type tokenAuth struct{ a *auth.Authenticator }

// FromTokens lets the broker's API tokens in: an admin token is an admin here, a viewer token a
// viewer; producer and worker tokens are refused, as they are for the admin service.
func FromTokens(a *auth.Authenticator) Authenticator { return tokenAuth{a} }

func (t tokenAuth) Authenticate(ctx context.Context, token string) (Role, error) {
	client, _ := ctx.Value(clientKey{}).(string)
	p, err := t.a.VerifyFrom(ctx, client, token)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			return RoleNone, ErrBadToken
		}
		return RoleNone, err
	}
	switch p.Role {
	case auth.RoleAdmin:
		return RoleAdmin, nil
	case auth.RoleViewer:
		return RoleViewer, nil
	}
	return RoleNone, nil
}
