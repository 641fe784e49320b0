package client

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// The environment variables that say where the broker is and how to reach it. The jobwire
// command, the Go examples and the Python and Node.js libraries read the same names; see
// docs/security.md#connecting-from-the-environment.
const (
	// EnvAddr is the broker's address, host:port (DefaultAddr when unset).
	EnvAddr = "JOBWIRE_ADDR"
	// EnvToken is the API token, for a broker started with --auth.
	EnvToken = "JOBWIRE_TOKEN"
	// EnvTLS set to "true" connects over TLS trusting the system's CAs; any of the TLS files
	// below implies it.
	EnvTLS = "JOBWIRE_TLS"
	// EnvTLSCA is a PEM file of the CA certificates to trust for the broker's certificate.
	EnvTLSCA = "JOBWIRE_TLS_CA"
	// EnvTLSCert and EnvTLSKey are the PEM client certificate and its key, for a broker that
	// requires client certificates (mutual TLS).
	EnvTLSCert = "JOBWIRE_TLS_CERT"
	EnvTLSKey  = "JOBWIRE_TLS_KEY"
	// EnvTLSServerName is the name to check the broker's certificate against, when the address
	// is not a name the certificate holds (an IP address, a tunnel).
	EnvTLSServerName = "JOBWIRE_TLS_SERVER_NAME"
)

// Settings are the connection settings of the environment variables above.
type Settings struct {
	Addr       string
	Token      string
	TLS        bool
	CA         string
	Cert, Key  string
	ServerName string
}

// SettingsFromEnv reads the settings through getenv (os.Getenv when nil). Addr is DefaultAddr
// when EnvAddr is unset.
func SettingsFromEnv(getenv func(string) string) Settings {
	if getenv == nil {
		getenv = os.Getenv
	}
	s := Settings{
		Addr:       getenv(EnvAddr),
		Token:      getenv(EnvToken),
		TLS:        getenv(EnvTLS) == "true",
		CA:         getenv(EnvTLSCA),
		Cert:       getenv(EnvTLSCert),
		Key:        getenv(EnvTLSKey),
		ServerName: getenv(EnvTLSServerName),
	}
	if s.Addr == "" {
		s.Addr = DefaultAddr
	}
	return s
}

// UsesTLS reports whether the settings ask for TLS: TLS is set, or a CA, client certificate or
// server name is given.
func (s Settings) UsesTLS() bool {
	return s.TLS || s.CA != "" || s.Cert != "" || s.Key != "" || s.ServerName != ""
}

// DialOptions turns the settings into Dial's options, checking them and reading the TLS
// files. An error names the variable to fix.
func (s Settings) DialOptions() ([]DialOption, error) {
	var opts []DialOption
	if s.Token != "" {
		if strings.ContainsAny(s.Token, " \t\r\n") {
			return nil, fmt.Errorf("%s holds white space; give the token exactly as it was printed", EnvToken)
		}
		opts = append(opts, WithToken(s.Token))
	}
	if (s.Cert == "") != (s.Key == "") {
		return nil, fmt.Errorf("%s and %s go together: set both or neither", EnvTLSCert, EnvTLSKey)
	}
	if s.UsesTLS() {
		cfg, err := TLSConfigFromFiles(s.CA, s.Cert, s.Key)
		if err != nil {
			return nil, err
		}
		cfg.ServerName = s.ServerName
		opts = append(opts, WithTLS(cfg))
	}
	return opts, nil
}

// DialEnv connects to the broker the environment names (EnvAddr, EnvToken and the TLS
// variables), with opts after the environment's options. A variable that cannot be used is an
// error naming it.
func DialEnv(ctx context.Context, opts ...DialOption) (*Client, error) {
	s := SettingsFromEnv(nil)
	envOpts, err := s.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("jobwire: dial %s: %w", s.Addr, err)
	}
	return Dial(ctx, s.Addr, append(envOpts, opts...)...)
}
