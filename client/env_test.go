package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/auth"
)

func TestSettingsFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if s := client.SettingsFromEnv(getenv); s.Addr != client.DefaultAddr || s.UsesTLS() {
		t.Errorf("empty environment: %+v, want the default address without TLS", s)
	}
	env[client.EnvTLS] = "true"
	if s := client.SettingsFromEnv(getenv); !s.UsesTLS() {
		t.Errorf("%s=true: %+v, want TLS", client.EnvTLS, s)
	}
	for name, s := range map[string]client.Settings{
		client.EnvToken:   {Token: "jw_a b"},
		client.EnvTLSKey:  {Cert: "client.pem"},
		client.EnvTLSCert: {Key: "client-key.pem"},
	} {
		if _, err := s.DialOptions(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: DialOptions = %v, want an error naming %s", s, err, name)
		}
	}
}

// TestDialEnvServerName: JOBWIRE_TLS_SERVER_NAME is the name the broker's certificate is
// checked against, so a name the certificate does not hold fails with a fix naming it, and one
// it holds connects.
func TestDialEnvServerName(t *testing.T) {
	b, f := secureBroker(t, true)
	for k, v := range map[string]string{
		client.EnvAddr: b.Addr, client.EnvToken: b.Token(auth.RoleProducer, auth.Scope{}), client.EnvTLS: "",
		client.EnvTLSCA: f.CA, client.EnvTLSCert: f.ClientCert, client.EnvTLSKey: f.ClientKey,
	} {
		t.Setenv(k, v)
	}
	for name, want := range map[string]bool{"jobwire.invalid": false, "localhost": true} {
		t.Setenv(client.EnvTLSServerName, name)
		c, err := client.DialEnv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Enqueue(context.Background(), "email.send", []byte(`{}`))
		_ = c.Close()
		if want {
			if err != nil {
				t.Errorf("server name %s: %v", name, err)
			}
			continue
		}
		ce := client.Classify(err)
		if ce == nil || !errors.Is(ce, client.ErrTLS) || !strings.Contains(ce.Fix, client.EnvTLSServerName) {
			t.Errorf("server name %s: Enqueue = %v, Classify = %v; want ErrTLS naming %s", name, err, ce, client.EnvTLSServerName)
		}
	}
}
