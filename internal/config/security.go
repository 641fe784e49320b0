package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// TLSFile is the tls section of the configuration file.
type TLSFile struct {
	Cert     string `yaml:"cert"`      // PEM certificate chain the broker presents
	Key      string `yaml:"key"`       // its PEM private key
	ClientCA string `yaml:"client_ca"` // PEM CA certificates; set: clients must present a certificate they signed
	// ReloadInterval is how often the files are checked for a new certificate (default 1m).
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// TLS is the checked TLS configuration; the zero value serves plaintext.
type TLS struct {
	Cert, Key, ClientCA string
	ReloadInterval      time.Duration
}

// Enabled reports whether the broker serves TLS.
func (t TLS) Enabled() bool { return t.Cert != "" }

// DefaultTLSReloadInterval is how often certificate files are checked unless configured.
const DefaultTLSReloadInterval = time.Minute

// applySecurity copies the file's security settings over c and returns what is wrong with
// them.
func (f File) applySecurity(c *Config) []string {
	var errs []string
	if f.TLS.Cert != "" {
		c.TLS.Cert = f.TLS.Cert
	}
	if f.TLS.Key != "" {
		c.TLS.Key = f.TLS.Key
	}
	if f.TLS.ClientCA != "" {
		c.TLS.ClientCA = f.TLS.ClientCA
	}
	if f.TLS.ReloadInterval != 0 {
		c.TLS.ReloadInterval = f.TLS.ReloadInterval
	}
	if f.Auth != nil {
		c.Auth = *f.Auth
	}
	if f.Insecure != nil {
		c.Insecure = *f.Insecure
	}
	if f.BootstrapTokenFile != "" {
		c.BootstrapTokenFile = f.BootstrapTokenFile
	}
	if c.TLS.ReloadInterval < time.Second {
		errs = append(errs, fmt.Sprintf("tls.reload_interval must be at least 1s, got %s", c.TLS.ReloadInterval))
	}
	if f.TokenCacheTTL != 0 {
		c.TokenCacheTTL = f.TokenCacheTTL
		if c.TokenCacheTTL < 0 || c.TokenCacheTTL > MaxTokenCacheTTL {
			errs = append(errs, fmt.Sprintf("token_cache_ttl must be more than 0 and at most %s (how long a revoked token may still work on another broker that missed the revocation), got %s",
				MaxTokenCacheTTL, c.TokenCacheTTL))
		}
	}
	if f.MaxWorkerStreamsPerToken != 0 {
		c.MaxWorkerStreamsPerToken = f.MaxWorkerStreamsPerToken
		if c.MaxWorkerStreamsPerToken < 1 {
			errs = append(errs, fmt.Sprintf("max_worker_streams_per_token must be at least 1, got %d", c.MaxWorkerStreamsPerToken))
		}
	}
	if f.HTTPAllowedHosts != nil {
		c.HTTPAllowedHosts = f.HTTPAllowedHosts
		for i, h := range c.HTTPAllowedHosts {
			if err := CheckAllowedHost(h); err != nil {
				errs = append(errs, fmt.Sprintf("http_allowed_hosts[%d] %v", i, err))
			}
		}
	}
	return errs
}

// MaxTokenCacheTTL bounds token_cache_ttl: a revocation must reach every broker in a time an
// operator can wait for.
const MaxTokenCacheTTL = time.Minute

// CheckAllowedHost checks an entry of http_allowed_hosts: a host name or IP address without a
// port, or "*." and a domain for every name under it. The error reads after the setting's name.
func CheckAllowedHost(h string) error {
	name := strings.TrimPrefix(h, "*.")
	if name == "" || strings.ContainsAny(name, ":/ *@") && net.ParseIP(name) == nil {
		return fmt.Errorf("must be a host name without a port, such as jobwire.example.com or *.example.com, got %q", h)
	}
	return nil
}

// CheckSecurity checks the security settings once every source (file, flags, environment) has
// been applied: TLS needs both a certificate and a key, and a broker that other machines can
// reach, on its gRPC port or its HTTP listener, must use TLS and auth unless Insecure says
// otherwise. With TLS on, the HTTP listener serves TLS with the same certificate.
func (c Config) CheckSecurity() error {
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return errors.New("TLS needs both a certificate and a key: give --tls-cert and --tls-key together")
	}
	if c.TLS.ClientCA != "" && c.TLS.Cert == "" {
		return errors.New("--tls-client-ca requires client certificates over TLS: give --tls-cert and --tls-key too")
	}
	if c.Insecure || (c.TLS.Enabled() && c.Auth) {
		return nil
	}
	if !Loopback(c.Listen) {
		return fmt.Errorf("refusing to listen on %s, which other machines can reach, without TLS and auth: add --tls-cert, --tls-key and --auth (see docs/security.md), or --insecure to serve it open anyway", c.Listen)
	}
	if c.HTTPListen != HTTPOff && c.HTTPListen != "" && !Loopback(c.HTTPListen) {
		return fmt.Errorf("refusing to serve the dashboard and metrics on %s, which other machines can reach, without TLS and auth: add --tls-cert, --tls-key and --auth (see docs/security.md), keep --http-listen on loopback, or give --insecure", c.HTTPListen)
	}
	return nil
}

// Loopback reports whether addr (host:port) listens on loopback only: an IP loopback address
// or "localhost". An empty host listens on every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
