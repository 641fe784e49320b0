package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/config"
)

// hostRequest sends a request to addr naming host in its Host header, as a browser does after
// a DNS rebinding: the name is the attacker's, the address the broker's.
func hostRequest(t *testing.T, method, addr, host, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// With auth off, the HTTP listener answers only for the names that belong to it: a page served
// under another name, rebound to the broker's address, cannot drive the dashboard's API, read
// it, or read the metrics. Health stays open to every name.
func TestHTTPListenerRefusesForeignHostNames(t *testing.T) {
	t.Parallel()
	a := runBroker(t, func(c *config.Config) {
		c.HTTPAllowedHosts = []string{"jobwire.example.com", "*.jobs.example.net"}
	})
	addr := a.HTTP.String()
	_, port, _ := strings.Cut(addr, ":")
	rebound := map[string]string{"Sec-Fetch-Site": "same-origin", "Content-Type": "text/plain"}
	pause := func(host string) (int, string) {
		return hostRequest(t, "POST", addr, host, "/api/rpc/PauseQueue", `{"queue":"q"}`, rebound)
	}
	for _, host := range []string{"rebind.evil.example:" + port, "rebind.evil.example", "jobwire.example.com.evil.example", "127.0.0.1.nip.io:" + port, "example.net", "evil-jobs.example.net"} {
		code, body := pause(host)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--http-allowed-hosts") {
			t.Errorf("PauseQueue with Host %s: %d %q, want 421 naming --http-allowed-hosts", host, code, body)
		}
		if code, _ := hostRequest(t, "GET", addr, host, "/api/rpc/ListQueues", "", nil); code != http.StatusMisdirectedRequest {
			t.Errorf("ListQueues with Host %s: %d, want 421", host, code)
		}
		if code, _ := hostRequest(t, "GET", addr, host, "/metrics", "", nil); code != http.StatusMisdirectedRequest {
			t.Errorf("/metrics with Host %s: %d, want 421", host, code)
		}
		if code, _ := hostRequest(t, "GET", addr, host, "/healthz", "", nil); code != http.StatusOK {
			t.Errorf("/healthz with Host %s: %d, want 200", host, code)
		}
	}
	for _, host := range []string{addr, "127.0.0.1", "localhost:" + port, "LOCALHOST.", "dash.localhost:" + port, "[::1]:" + port,
		"jobwire.example.com", "a.jobs.example.net:" + port} {
		if code, body := pause(host); code != http.StatusOK {
			t.Errorf("PauseQueue with Host %s: %d %q, want 200", host, code, body)
		}
	}
}
