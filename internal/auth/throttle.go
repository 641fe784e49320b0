package auth

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// FailureOptions bound the failed authentications one client may cause: each failure that
// read storage takes a unit from the client's bucket, which refills at Rate a second up to
// Burst; while it is empty the client's tokens are refused without a storage read, unless
// cached. Clients are told apart by IP address, IPv6 ones by their /64 network.
type FailureOptions struct {
	// Rate is how many failed authentications a second one client may cause over time.
	// Zero: DefaultFailureRate.
	Rate float64
	// Burst is how many it may cause at once. Zero: DefaultFailureBurst.
	Burst int
}

// DefaultFailureRate and DefaultFailureBurst: 10 failed authentications a second per client,
// 20 at once. A client with a valid token never fails; a misconfigured one, retrying with a
// revoked token, is answered from the cache of refused tokens.
const (
	DefaultFailureRate  = 10
	DefaultFailureBurst = 20
)

func (o FailureOptions) withDefaults() FailureOptions {
	if o.Rate <= 0 {
		o.Rate = DefaultFailureRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultFailureBurst
	}
	return o
}

// ErrThrottled is matched by a *ThrottledError.
var ErrThrottled = errors.New("too many failed authentications")

// ThrottledError refuses a token without looking at it: its client failed too many
// authentications lately.
type ThrottledError struct {
	Peer       string
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from %s; retry in %s", e.Peer, e.RetryAfter)
}

func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// maxPeers bounds the clients tracked one by one; past it, new clients share one bucket, so
// that an attacker with many addresses gains no more than one client's allowance from them.
const maxPeers = 10000

// maxDebt bounds how far failures that ran at once (all looked up before any was counted) can
// overdraw a bucket, in seconds of refill.
const maxDebt = 60

type bucket struct {
	units float64
	at    time.Time
}

// failures is the token bucket of each client's failed authentications.
type failures struct {
	opts FailureOptions

	mu       sync.Mutex
	peers    map[string]*bucket
	overflow bucket
}

func newFailures(opts FailureOptions) *failures {
	return &failures{opts: opts, peers: map[string]*bucket{}}
}

// peerKey is the bucket a client address counts against.
func peerKey(peer string) string {
	ip := net.ParseIP(peer)
	if ip == nil || ip.To4() != nil {
		return peer
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// bucketLocked is peer's bucket refilled up to now; nil when it is full and untracked.
func (f *failures) bucketLocked(peer string, now time.Time, create bool) *bucket {
	key := peerKey(peer)
	b := f.peers[key]
	if b == nil {
		switch {
		case !create:
			return nil
		case len(f.peers) >= maxPeers:
			f.pruneLocked(now)
		}
		if len(f.peers) >= maxPeers {
			b = &f.overflow
			if b.at.IsZero() {
				b.units, b.at = float64(f.opts.Burst), now
			}
		} else {
			b = &bucket{units: float64(f.opts.Burst), at: now}
			f.peers[key] = b
		}
	}
	if now.After(b.at) {
		b.units = min(float64(f.opts.Burst), b.units+now.Sub(b.at).Seconds()*f.opts.Rate)
		b.at = now
	}
	return b
}

// pruneLocked forgets the clients whose bucket has refilled.
func (f *failures) pruneLocked(now time.Time) {
	for k, b := range f.peers {
		if b.units+now.Sub(b.at).Seconds()*f.opts.Rate >= float64(f.opts.Burst) {
			delete(f.peers, k)
		}
	}
}

// wait is how long peer must wait before its next token is looked up; zero: at once.
func (f *failures) wait(peer string, now time.Time) time.Duration {
	if peer == "" {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bucketLocked(peer, now, false)
	if b == nil && len(f.peers) >= maxPeers {
		b = f.bucketLocked(peer, now, true) // an untracked client shares the overflow bucket
	}
	if b == nil || b.units >= 1 {
		return 0
	}
	return max(time.Millisecond, time.Duration((1-b.units)/f.opts.Rate*float64(time.Second)).Round(time.Millisecond))
}

// charge counts a failed authentication of peer.
func (f *failures) charge(peer string, now time.Time) {
	if peer == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bucketLocked(peer, now, true)
	b.units = max(b.units-1, -maxDebt*f.opts.Rate)
}
