package main

import (
	"flag"
	"strings"

	"github.com/jobwire/jobwire/client"
)

// clientSecurity holds the TLS and token flags of the commands that talk to a broker.
type clientSecurity struct {
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	tlsServerName          string
	token                  string
}

// The defaults come from the environment through client.SettingsFromEnv, which the Go examples
// read too (docs/security.md#connecting-from-the-environment).
func (s *clientSecurity) add(e *env, fs *flag.FlagSet) {
	env := client.SettingsFromEnv(e.getenv)
	fs.BoolVar(&s.tls, "tls", env.TLS,
		"connect over TLS, trusting the system's CAs unless --tls-ca is given (env JOBWIRE_TLS=true)")
	fs.StringVar(&s.tlsCA, "tls-ca", env.CA, "PEM CA certificates to trust for the broker's certificate; implies --tls (env JOBWIRE_TLS_CA)")
	fs.StringVar(&s.tlsCert, "tls-cert", env.Cert, "PEM client certificate for a broker that requires one; implies --tls (env JOBWIRE_TLS_CERT)")
	fs.StringVar(&s.tlsKey, "tls-key", env.Key, "PEM private key of --tls-cert (env JOBWIRE_TLS_KEY)")
	fs.StringVar(&s.tlsServerName, "tls-server-name", env.ServerName, "name to check the broker's certificate against, when --addr is not one it holds; implies --tls (env JOBWIRE_TLS_SERVER_NAME)")
	fs.StringVar(&s.token, "token", env.Token, "API token for a broker with auth on (env JOBWIRE_TOKEN)")
}

// dialOptions turns the flags into the client's options, checking the files first.
func (s *clientSecurity) dialOptions() ([]client.DialOption, error) {
	var opts []client.DialOption
	if s.token != "" {
		if strings.ContainsAny(s.token, " \t\r\n") {
			return nil, usageErrorf("--token holds white space; give the token exactly as it was printed")
		}
		opts = append(opts, client.WithToken(s.token))
	}
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return nil, usageErrorf("--tls-cert and --tls-key go together: give both or neither")
	}
	if s.tls || s.tlsCA != "" || s.tlsCert != "" || s.tlsServerName != "" {
		cfg, err := client.TLSConfigFromFiles(s.tlsCA, s.tlsCert, s.tlsKey)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		cfg.ServerName = s.tlsServerName
		opts = append(opts, client.WithTLS(cfg))
	}
	return opts, nil
}
