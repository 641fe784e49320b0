package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/jobwire/jobwire/internal/config"
)

// securityFlags are serve's TLS and auth flags.
type securityFlags struct {
	tlsCert, tlsKey, tlsClientCA, bootstrapFile stringFlag
	httpAllowedHosts                            stringFlag
	auth, insecure                              boolFlag
	// bootstrapToken comes from JOBWIRE_BOOTSTRAP_TOKEN only: a secret on the command line
	// would show in the process list.
	bootstrapToken string
}

func (sf *securityFlags) vars(e *env) []serveVar {
	sf.bootstrapToken = e.getenv("JOBWIRE_BOOTSTRAP_TOKEN")
	return []serveVar{
		{&sf.tlsCert, "tls-cert", "JOBWIRE_TLS_CERT", "PEM certificate (chain) to serve TLS with; re-read when the file changes"},
		{&sf.tlsKey, "tls-key", "JOBWIRE_TLS_KEY", "PEM private key of --tls-cert"},
		{&sf.tlsClientCA, "tls-client-ca", "JOBWIRE_TLS_CLIENT_CA", "PEM CA certificates; clients must present a certificate they signed (mutual TLS)"},
		{&sf.auth, "auth", "JOBWIRE_AUTH", "require an API token on every call (see jobwire tokens)"},
		{&sf.insecure, "insecure", "JOBWIRE_INSECURE", "allow listening beyond loopback without TLS and auth"},
		{&sf.bootstrapFile, "bootstrap-token-file", "JOBWIRE_BOOTSTRAP_TOKEN_FILE",
			"where the first admin token is written with --auth and no tokens yet (default: the database path + .admin-token)"},
		{&sf.httpAllowedHosts, "http-allowed-hosts", "JOBWIRE_HTTP_ALLOWED_HOSTS",
			"comma-separated host names the HTTP listener answers without --auth, besides loopback names, IP addresses and its own host (*.example.com: every name under it)"},
	}
}

// apply sets cfg's security options from the flags and checks them with the listening
// address, before anything is opened.
func (sf *securityFlags) apply(cfg *config.Config) error {
	for _, f := range []struct {
		flag *stringFlag
		dst  *string
	}{{&sf.tlsCert, &cfg.TLS.Cert}, {&sf.tlsKey, &cfg.TLS.Key}, {&sf.tlsClientCA, &cfg.TLS.ClientCA}, {&sf.bootstrapFile, &cfg.BootstrapTokenFile}} {
		if f.flag.set {
			*f.dst = f.flag.v
		}
	}
	if sf.auth.set {
		cfg.Auth = sf.auth.v
	}
	if sf.insecure.set {
		cfg.Insecure = sf.insecure.v
	}
	cfg.BootstrapToken = sf.bootstrapToken
	if sf.httpAllowedHosts.set {
		cfg.HTTPAllowedHosts = nil
		for _, h := range strings.Split(sf.httpAllowedHosts.v, ",") {
			h = strings.TrimSpace(h)
			if err := config.CheckAllowedHost(h); err != nil {
				return usageErrorf("%s: each entry %v", sf.httpAllowedHosts.setBy("http-allowed-hosts"), err)
			}
			cfg.HTTPAllowedHosts = append(cfg.HTTPAllowedHosts, h)
		}
	}
	if err := cfg.CheckSecurity(); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

// boolFlag is a serve flag that takes no value on the command line (--auth) and true or false
// in the environment (JOBWIRE_AUTH=true).
type boolFlag struct {
	origin
	v   bool
	set bool
}

func (f *boolFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatBool(f.v)
}

func (f *boolFlag) IsBoolFlag() bool { return true }
func (f *boolFlag) typeName() string { return "" }

func (f *boolFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errInvalidBool
	}
	f.v, f.set, f.from = v, true, ""
	return nil
}

var errInvalidBool = errors.New("must be true or false")
