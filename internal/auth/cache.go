package auth

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/jobwire/jobwire/store"
)

// CacheOptions say how long the Authenticator remembers what it looked up.
type CacheOptions struct {
	// TTL is how long a verified token is accepted without reading storage again. It bounds
	// how long a broker accepts a token revoked through another broker whose revocation it
	// did not hear of (ClusterEvent). Zero: DefaultCacheTTL.
	TTL time.Duration
	// RefusedTTL is how long a token found unknown or revoked is refused without reading
	// storage again. Zero: DefaultRefusedTTL.
	RefusedTTL time.Duration
}

// DefaultCacheTTL and DefaultRefusedTTL are the cache lifetimes unless configured.
const (
	DefaultCacheTTL   = 5 * time.Second
	DefaultRefusedTTL = 5 * time.Second
)

func (o CacheOptions) withDefaults() CacheOptions {
	if o.TTL <= 0 {
		o.TTL = DefaultCacheTTL
	}
	if o.RefusedTTL <= 0 {
		o.RefusedTTL = DefaultRefusedTTL
	}
	return o
}

// maxCached bounds each cache, of verified and of refused tokens: when one is full its expired
// entries go, and if none had expired it starts over.
const maxCached = 4096

type cached struct {
	p       Principal
	expires time.Time
}

// lookup is what the caches know of a token.
type lookup int

const (
	unknown  lookup = iota
	verified        // verified less than a TTL ago
	stale           // verified longer ago: to be read again, not a guess
	refused         // found unknown or revoked less than a RefusedTTL ago
)

// cached looks h up. An expired verified entry stays until the token is read again (or the
// cache fills), so that reading it again is not throttled as a guess would be: a client with
// a valid token that shares its address with a guessing one keeps working.
func (a *Authenticator) cached(h [sha256.Size]byte, now time.Time) (Principal, lookup) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, hit := a.cache[h]; hit {
		if now.Before(c.expires) {
			return c.p, verified
		}
		return Principal{}, stale
	}
	if until, hit := a.refused[h]; hit {
		if now.Before(until) {
			return Principal{}, refused
		}
		delete(a.refused, h)
	}
	return Principal{}, unknown
}

// remember caches p, verified at now, under h. a.mu is held.
func (a *Authenticator) remember(h [sha256.Size]byte, p Principal, now time.Time) {
	if len(a.cache) >= maxCached {
		for k, c := range a.cache {
			if !now.Before(c.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCached {
			clear(a.cache)
		}
	}
	a.cache[h] = cached{p: p, expires: now.Add(a.ttl.TTL)}
}

// refuse remembers that the token hashed h was found unknown or revoked at now, and drops it
// from the verified ones.
//
// A token created later is never refused by such an entry: a created token carries 256 bits
// drawn at its creation and is shown only once stored, so no client can have presented it
// before. (A bootstrap token chosen by the operator is stored before the broker serves.)
func (a *Authenticator) refuse(h [sha256.Size]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.refused) >= maxCached {
		for k, until := range a.refused {
			if !now.Before(until) {
				delete(a.refused, k)
			}
		}
		if len(a.refused) >= maxCached {
			clear(a.refused)
		}
	}
	delete(a.cache, h)
	a.refused[h] = now.Add(a.ttl.RefusedTTL)
}

// forget makes the token with id refused from now on and ends the streams it opened; it
// returns how many it ended.
func (a *Authenticator) forget(id string) int {
	a.mu.Lock()
	a.revoked[id] = struct{}{}
	for h, c := range a.cache {
		if c.p.TokenID == id {
			delete(a.cache, h)
		}
	}
	streams := a.streams[id]
	delete(a.streams, id)
	a.mu.Unlock()
	for t := range streams {
		t.cancel(ErrRevoked)
	}
	return len(streams)
}

// ClusterEvent acts on an event of the broker's cluster (broker.WatchCluster): a token revoked
// through another broker is refused here from now on and the streams it opened here are
// ended. After a gap in the events (EventResync), when revocations may have been missed, every
// cached token is read again before it is trusted, and so are the tokens of the open streams.
// It does not block.
func (a *Authenticator) ClusterEvent(e store.Event) {
	switch e.Kind {
	case store.EventTokenRevoked:
		if n := a.forget(e.Key); n > 0 {
			a.log.Info("token revoked through another broker", "token_id", e.Key, "broker", e.From, "streams_closed", n)
		}
	case store.EventResync:
		a.mu.Lock()
		for h, c := range a.cache {
			c.expires = time.Time{} // read again before it is trusted
			a.cache[h] = c
		}
		open := len(a.streams) > 0
		a.mu.Unlock()
		if open {
			go a.recheckStreams()
		}
	}
}

// recheckTimeout bounds the storage read of recheckStreams.
const recheckTimeout = 30 * time.Second

// recheckStreams ends the open streams whose token storage shows revoked.
func (a *Authenticator) recheckStreams() {
	ctx, cancel := context.WithTimeout(context.Background(), recheckTimeout)
	defer cancel()
	recs, err := a.st.TokenList(ctx)
	if err != nil {
		a.log.Warn("cannot read the tokens of open worker streams after missing cluster events", "err", err)
		return
	}
	for _, r := range recs {
		if r.RevokedAt.IsZero() {
			continue
		}
		a.mu.Lock()
		_, open := a.streams[r.ID]
		a.mu.Unlock()
		if open {
			n := a.forget(r.ID)
			a.log.Info("token revoked while cluster events were missed", "token_id", r.ID, "streams_closed", n)
		}
	}
}
