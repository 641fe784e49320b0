package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithToken sends token as "authorization: Bearer <token>" on every call, for a broker started
// with auth on. Over plaintext the token crosses the network readable: outside loopback use it
// with WithTLS or WithTLSFiles.
func WithToken(token string) DialOption {
	return dialOptionFunc(func(c *dialConfig) {
		c.grpcOpts = append(c.grpcOpts, grpc.WithPerRPCCredentials(TokenCredentials(token)))
	})
}

// TokenCredentials are the per-call credentials WithToken uses, for code that builds its own
// grpc.ClientConn: grpc.WithPerRPCCredentials(client.TokenCredentials(token)).
func TokenCredentials(token string) credentials.PerRPCCredentials { return bearer(token) }

// bearer is a token sent as call metadata.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that tokens work against a broker on loopback without
// TLS; the broker refuses to listen elsewhere without TLS unless told it is insecure.
func (bearer) RequireTransportSecurity() bool { return false }

// WithTLS talks TLS to the broker with cfg: set RootCAs to trust a private CA, and
// Certificates (or GetClientCertificate) for a broker that requires client certificates.
//
// A cfg without a client certificate ends the handshake when the broker asks for one, with an
// error that Classify reports as ErrTLS, instead of letting the broker refuse the connection
// after the handshake, which would look like a dropped connection.
func WithTLS(cfg *tls.Config) DialOption {
	if len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil {
		cfg = cfg.Clone()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, errNoClientCert
		}
	}
	return dialOptionFunc(func(c *dialConfig) {
		c.grpcOpts = append(c.grpcOpts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	})
}

// WithTLSFiles talks TLS to the broker, trusting the CA certificates in the PEM file caFile
// ("" trusts the system's roots), and presents the client certificate in certFile with its key
// in keyFile when both are given (mutual TLS). The files are read by Dial, which fails when
// one cannot be used.
func WithTLSFiles(caFile, certFile, keyFile string) DialOption {
	return dialOptionFunc(func(c *dialConfig) {
		cfg, err := TLSConfigFromFiles(caFile, certFile, keyFile)
		if err != nil {
			c.err = errors.Join(c.err, err)
			return
		}
		WithTLS(cfg).applyDial(c)
	})
}

// TLSConfigFromFiles builds the client TLS configuration WithTLSFiles uses.
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate file and its key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
