package server

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// tokenStreams counts the open worker streams of each token.
type tokenStreams struct {
	mu sync.Mutex
	n  map[string]int
}

// acquire counts one more stream of token id unless it has limit open already.
func (t *tokenStreams) acquire(id string, limit int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n[id] >= limit {
		return false
	}
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[id]++
	return true
}

// release counts one stream of token id fewer.
func (t *tokenStreams) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n[id]--; t.n[id] <= 0 {
		delete(t.n, id)
	}
}

// peerIP is the IP address of the call's client, without the port: failed authentications are
// throttled per address. It is empty for a call with no network peer (the dashboard's calls
// through the local connection).
func peerIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}
