package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseSecurity(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
listen: 0.0.0.0:7070
auth: true
tls: {cert: server.pem, key: server-key.pem, client_ca: ca.pem, reload_interval: 30s}
bootstrap_token_file: /run/secrets/admin
`))
	if err != nil {
		t.Fatal(err)
	}
	want := TLS{Cert: "server.pem", Key: "server-key.pem", ClientCA: "ca.pem", ReloadInterval: 30 * time.Second}
	if cfg.TLS != want || !cfg.Auth || cfg.Insecure || cfg.BootstrapTokenFile != "/run/secrets/admin" {
		t.Fatalf("security settings %+v, auth %v, insecure %v", cfg.TLS, cfg.Auth, cfg.Insecure)
	}
	if err := cfg.CheckSecurity(); err != nil {
		t.Fatalf("TLS and auth on a network address: %v", err)
	}
	if d := Defaults(); d.Auth || d.TLS.Enabled() || d.TLS.ReloadInterval != time.Minute || d.CheckSecurity() != nil {
		t.Fatalf("defaults: %+v", d)
	}
	if _, err := Parse([]byte("tls: {reload_interval: 10ms}")); err == nil || !strings.Contains(err.Error(), "tls.reload_interval") {
		t.Fatalf("a 10ms reload interval: %v", err)
	}
}

func TestCheckSecurity(t *testing.T) {
	t.Parallel()
	tls := TLS{Cert: "c", Key: "k"}
	for _, c := range []struct {
		name string
		cfg  Config
		want string // "" for no error
	}{
		{"loopback, open", Config{Listen: "127.0.0.1:7070"}, ""},
		{"localhost, open", Config{Listen: "localhost:7070"}, ""},
		{"IPv6 loopback, open", Config{Listen: "[::1]:7070"}, ""},
		{"network, open", Config{Listen: "10.0.0.5:7070"}, "refusing to listen on 10.0.0.5:7070"},
		{"every interface, open", Config{Listen: ":7070"}, "refusing"},
		{"network, TLS only", Config{Listen: "0.0.0.0:7070", TLS: tls}, "refusing"},
		{"network, auth only", Config{Listen: "0.0.0.0:7070", Auth: true}, "refusing"},
		{"network, TLS and auth", Config{Listen: "0.0.0.0:7070", TLS: tls, Auth: true}, ""},
		{"network, insecure", Config{Listen: "0.0.0.0:7070", Insecure: true}, ""},
		{"cert without key", Config{Listen: "127.0.0.1:7070", TLS: TLS{Cert: "c"}}, "both a certificate and a key"},
		{"client CA without TLS", Config{Listen: "127.0.0.1:7070", TLS: TLS{ClientCA: "ca"}}, "--tls-client-ca"},
		{"HTTP on the network, open", Config{Listen: "127.0.0.1:7070", HTTPListen: "0.0.0.0:7071"}, "refusing to serve the dashboard and metrics on 0.0.0.0:7071"},
		{"HTTP on the network, TLS and auth", Config{Listen: "127.0.0.1:7070", HTTPListen: "0.0.0.0:7071", TLS: tls, Auth: true}, ""},
		{"HTTP on the network, insecure", Config{Listen: "127.0.0.1:7070", HTTPListen: ":7071", Insecure: true}, ""},
		{"HTTP off", Config{Listen: "127.0.0.1:7070", HTTPListen: HTTPOff}, ""},
	} {
		err := c.cfg.CheckSecurity()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

func TestParseTokenLimitsAndAllowedHosts(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
token_cache_ttl: 2s
max_worker_streams_per_token: 40
http_allowed_hosts: [jobwire.example.com, "*.jobs.example.net", 10.0.0.5]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TokenCacheTTL != 2*time.Second || cfg.MaxWorkerStreamsPerToken != 40 || len(cfg.HTTPAllowedHosts) != 3 {
		t.Fatalf("token cache %s, streams per token %d, allowed hosts %v", cfg.TokenCacheTTL, cfg.MaxWorkerStreamsPerToken, cfg.HTTPAllowedHosts)
	}
	if d := Defaults(); d.TokenCacheTTL != 5*time.Second || d.MaxWorkerStreamsPerToken != 250 || d.HTTPAllowedHosts != nil {
		t.Fatalf("defaults: token cache %s, streams per token %d, allowed hosts %v", d.TokenCacheTTL, d.MaxWorkerStreamsPerToken, d.HTTPAllowedHosts)
	}
	for doc, want := range map[string]string{
		"token_cache_ttl: 2m":                      "token_cache_ttl must be more than 0 and at most 1m0s",
		"token_cache_ttl: -1s":                     "token_cache_ttl must be more than 0",
		"max_worker_streams_per_token: -3":         "max_worker_streams_per_token must be at least 1, got -3",
		"http_allowed_hosts: [jobwire.example:80]": `http_allowed_hosts[0] must be a host name without a port, such as jobwire.example.com or *.example.com, got "jobwire.example:80"`,
		`http_allowed_hosts: ["*"]`:                `http_allowed_hosts[0] must be a host name`,
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
