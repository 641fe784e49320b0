package web

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// hostGuard refuses requests that name a host this listener does not belong to. With
// authentication off every caller is an admin, so a web page on another site could drive the
// dashboard's API through DNS rebinding: its name, resolved again to 127.0.0.1, makes the
// browser send the page's requests to the broker as same-origin ones, with the page's name in
// the Host header. Such a request is refused here whatever its origin headers say.
//
// Allowed are IP addresses (rebinding needs a name the attacker controls), "localhost" and
// names under it, the listener's own host, and the names configured. /healthz and /readyz stay
// open to every name, for load balancers and orchestrators.
type hostGuard struct {
	next    http.Handler
	exact   map[string]bool
	domains []string // ".example.com" for "*.example.com"
}

func newHostGuard(next http.Handler, listenHost string, allowed []string) *hostGuard {
	g := &hostGuard{next: next, exact: map[string]bool{}}
	if h := normalHost(listenHost); h != "" {
		g.exact[h] = true
	}
	for _, a := range allowed {
		if d, ok := strings.CutPrefix(a, "*."); ok {
			g.domains = append(g.domains, "."+normalHost(d))
		} else {
			g.exact[normalHost(a)] = true
		}
	}
	return g
}

// normalHost is a host name as the guard compares it: lower case, without a port, brackets or a
// final dot.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	return strings.ToLower(h)
}

// allows reports whether host (a request's Host header) names this listener.
func (g *hostGuard) allows(host string) bool {
	h := normalHost(host)
	switch {
	case h == "" || net.ParseIP(h) != nil:
		return true
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	case g.exact[h]:
		return true
	}
	for _, d := range g.domains {
		if strings.HasSuffix(h, d) {
			return true
		}
	}
	return false
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !g.allows(r.Host) {
		http.Error(w, fmt.Sprintf("this listener does not answer for the host %q: with auth off it answers only for IP addresses, localhost and its own host name; "+
			"to reach it under another name (through a proxy), add the name to --http-allowed-hosts (see docs/security.md)", r.Host),
			http.StatusMisdirectedRequest)
		return
	}
	g.next.ServeHTTP(w, r)
}
