package io.jobwire.worker;

import static io.jobwire.worker.ConnectionSettings.ENV_TLS;
import static io.jobwire.worker.ConnectionSettings.ENV_TLS_CA;
import static io.jobwire.worker.ConnectionSettings.ENV_TLS_CERT;
import static io.jobwire.worker.ConnectionSettings.ENV_TLS_KEY;
import static io.jobwire.worker.ConnectionSettings.ENV_TLS_SERVER_NAME;
import static io.jobwire.worker.ConnectionSettings.ENV_TOKEN;

import io.grpc.Status;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import java.util.Locale;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;

/**
 * Tells a connection failure that no reconnect can fix (a TLS mismatch, a refused token) from a
 * broker that is down or restarting. gRPC reports both as UNAVAILABLE; the words of the failure
 * and its causes tell most apart, and when the broker closed the connection without a word, a
 * TLS handshake with it (a probe) tells a TLS broker from one that is not there.
 */
final class ConnectErrors {
  /** How long the TLS probe of a broker that closed a connection may take. */
  static final int PROBE_TIMEOUT_MILLIS = 5000;

  private ConnectErrors() {}

  /** What the probe found. */
  enum Probe {
    /** Nothing answered a TLS handshake. */
    NONE,
    /** The handshake succeeded. */
    TLS,
    /** The handshake succeeded, then the broker refused the connection: it wants a client certificate. */
    CERTIFICATE_REQUIRED
  }

  /**
   * The failure as a BrokerConnectException when no reconnect can fix it, else null. usesTls says
   * whether the worker's channel is TLS; clientCert whether it presents a client certificate.
   */
  static BrokerConnectException classify(Status status, String address, boolean usesTls, boolean clientCert) {
    Status.Code code = status.getCode();
    String msg = status.getDescription() == null ? "" : status.getDescription();
    Throwable cause = status.getCause();
    if (code == Status.Code.UNAUTHENTICATED) {
      return new BrokerConnectException(BrokerConnectException.Kind.AUTH, "the broker refused the token: " + msg,
          "set " + ENV_TOKEN + " (token) to a token the broker issued (jobwire tokens create)", status, cause);
    }
    if (code == Status.Code.PERMISSION_DENIED) {
      return new BrokerConnectException(BrokerConnectException.Kind.AUTH, "the token is not allowed this: " + msg,
          "use a token whose role and scope cover it (jobwire tokens create --role worker --types ...)", status, cause);
    }
    if (code != Status.Code.UNAVAILABLE) {
      return null;
    }
    String words = words(status);
    if (words.contains("not an ssl/tls record") || words.contains("wrong version number") || words.contains("wrong_version_number")) {
      return tls("this worker connected with TLS but the broker does not serve TLS",
          "start the broker with --tls-cert and --tls-key, or connect without TLS (unset " + ENV_TLS + ", "
              + ENV_TLS_CA + ", " + ENV_TLS_CERT + " and " + ENV_TLS_KEY + ")", status);
    }
    if (words.contains("pkix path") || words.contains("unable to find valid certification path")
        || words.contains("certificate_verify_failed") || words.contains("certificate verify failed")) {
      return tls("the broker's certificate is not signed by a CA this worker trusts (" + firstLine(status) + ")",
          "set " + ENV_TLS_CA + " (tlsCa) to the CA certificate that signed the broker's certificate", status);
    }
    if (words.contains("no subject alternative") || words.contains("no name matching")) {
      return tls("the broker's certificate does not name the address dialled (" + firstLine(status) + ")",
          "connect by a name the certificate holds, or set " + ENV_TLS_SERVER_NAME + " (tlsServerName) to one", status);
    }
    if (words.contains("certificate_required") || words.contains("certificate required") || words.contains("bad_certificate")
        || words.contains("bad certificate") || words.contains("unknown_ca") || words.contains("unknown ca")) {
      return clientCert(status, clientCert);
    }
    if (words.contains("connection refused") || words.contains("unresolvedaddress") || words.contains("unknownhost")
        || words.contains("name or service not known")) {
      return null; // nothing listens there (yet): a broker that is starting
    }
    // The broker closed the connection without a word: a TLS broker does that to a plaintext
    // client, and, after the handshake, to a client without the certificate it requires.
    Probe probe = probe(address, usesTls && !clientCert);
    if (!usesTls && probe != Probe.NONE) {
      return tls("the broker serves TLS and this worker connected without it",
          "set " + ENV_TLS_CA + " (tlsCa) to the CA of the broker's certificate, or " + ENV_TLS
              + "=true (tls) if the system trusts it", status);
    }
    if (usesTls && !clientCert && probe == Probe.CERTIFICATE_REQUIRED) {
      return clientCert(status, false);
    }
    return null;
  }

  private static BrokerConnectException tls(String problem, String fix, Status status) {
    return new BrokerConnectException(BrokerConnectException.Kind.TLS, problem, fix, status, status.getCause());
  }

  private static BrokerConnectException clientCert(Status status, boolean clientCert) {
    if (!clientCert) {
      return tls("the broker requires a client certificate (mutual TLS) and none was given",
          "set " + ENV_TLS_CERT + " and " + ENV_TLS_KEY + " (tlsClientCertificate) to a certificate signed by the CA the broker trusts",
          status);
    }
    return tls("the broker refused this worker's client certificate (" + firstLine(status) + ")",
        "use a client certificate signed by the CA the broker trusts (its --tls-client-ca), and not expired", status);
  }

  /** The status's description and every cause's class and message, in lower case. */
  static String words(Status status) {
    StringBuilder b = new StringBuilder();
    if (status.getDescription() != null) {
      b.append(status.getDescription()).append('\n');
    }
    for (Throwable t = status.getCause(); t != null; t = t.getCause() == t ? null : t.getCause()) {
      b.append(t.getClass().getName()).append(": ").append(t.getMessage()).append('\n');
    }
    return b.toString().toLowerCase(Locale.ROOT);
  }

  private static String firstLine(Status status) {
    Throwable root = status.getCause();
    while (root != null && root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    if (root != null && root.getMessage() != null) {
      return root.getMessage();
    }
    return status.getDescription() == null ? status.getCode().toString() : status.getDescription();
  }

  /**
   * Whether address answers a TLS handshake made without a client certificate. With verdict, it
   * also waits for the server's first bytes and answers CERTIFICATE_REQUIRED when the server
   * refuses the connection instead (with TLS 1.3 a refused client certificate arrives after the
   * handshake). Nothing is sent once the handshake is done.
   */
  static Probe probe(String address, boolean verdict) {
    int colon = address.lastIndexOf(':');
    if (colon < 0) {
      return Probe.NONE;
    }
    String host = address.substring(0, colon).replace("[", "").replace("]", "");
    int port;
    try {
      port = Integer.parseInt(address.substring(colon + 1));
    } catch (NumberFormatException e) {
      return Probe.NONE;
    }
    boolean handshaken = false;
    try {
      SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(null, new TrustManager[] {new TrustAll()}, new SecureRandom());
      try (Socket raw = new Socket()) {
        raw.connect(new InetSocketAddress(host, port), PROBE_TIMEOUT_MILLIS);
        raw.setSoTimeout(PROBE_TIMEOUT_MILLIS);
        try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket(raw, host, port, false)) {
          s.startHandshake();
          handshaken = true;
          if (!verdict) {
            return Probe.TLS;
          }
          s.setSoTimeout(1000);
          InputStream in = s.getInputStream();
          try {
            return in.read() < 0 ? Probe.CERTIFICATE_REQUIRED : Probe.TLS;
          } catch (SocketTimeoutException e) {
            return Probe.TLS; // the server waits for the client: it accepted the connection
          }
        }
      }
    } catch (IOException e) {
      String m = String.valueOf(e.getMessage()).toLowerCase(Locale.ROOT);
      if (handshaken || m.contains("certificate_required") || m.contains("handshake_failure")) {
        return Probe.CERTIFICATE_REQUIRED;
      }
      return Probe.NONE;
    } catch (java.security.GeneralSecurityException e) {
      return Probe.NONE;
    }
  }

  /** Trusts any certificate: the probe only asks whether the other side speaks TLS. */
  private static final class TrustAll implements X509TrustManager {
    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType) {}

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) {}

    @Override
    public X509Certificate[] getAcceptedIssuers() {
      return new X509Certificate[0];
    }
  }
}
