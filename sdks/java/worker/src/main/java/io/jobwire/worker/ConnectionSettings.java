package io.jobwire.worker;

import java.util.Map;
import java.util.Objects;

/**
 * Where the broker is and how to reach it, from the environment variables every Jobwire client
 * reads (docs/security.md, "Connecting from the environment").
 *
 * @param address host:port, {@link #DEFAULT_ADDRESS} when JOBWIRE_ADDR is unset
 * @param token the API token, or null
 * @param tls whether to connect over TLS: JOBWIRE_TLS=true, or any of the TLS files or the server
 *     name given
 * @param caFile PEM CA certificates to trust (null: the system's)
 * @param certFile PEM client certificate, for a broker that requires one (with keyFile)
 * @param keyFile its PEM (PKCS#8) private key
 * @param serverName the name to check the broker's certificate against, when the address is not
 *     one it holds
 */
public record ConnectionSettings(
    String address, String token, boolean tls, String caFile, String certFile, String keyFile, String serverName) {
  public static final String ENV_ADDR = "JOBWIRE_ADDR";
  public static final String ENV_TOKEN = "JOBWIRE_TOKEN";
  public static final String ENV_TLS = "JOBWIRE_TLS";
  public static final String ENV_TLS_CA = "JOBWIRE_TLS_CA";
  public static final String ENV_TLS_CERT = "JOBWIRE_TLS_CERT";
  public static final String ENV_TLS_KEY = "JOBWIRE_TLS_KEY";
  public static final String ENV_TLS_SERVER_NAME = "JOBWIRE_TLS_SERVER_NAME";

  public static final String DEFAULT_ADDRESS = "127.0.0.1:7070";

  /** The settings of this process's environment. */
  public static ConnectionSettings fromEnv() {
    return fromEnv(System.getenv());
  }

  /** The settings of env; unset and empty variables are left out. */
  public static ConnectionSettings fromEnv(Map<String, String> env) {
    Objects.requireNonNull(env, "env");
    String ca = get(env, ENV_TLS_CA);
    String cert = get(env, ENV_TLS_CERT);
    String key = get(env, ENV_TLS_KEY);
    String serverName = get(env, ENV_TLS_SERVER_NAME);
    boolean tls = "true".equals(env.get(ENV_TLS)) || ca != null || cert != null || key != null || serverName != null;
    String addr = get(env, ENV_ADDR);
    return new ConnectionSettings(addr == null ? DEFAULT_ADDRESS : addr, get(env, ENV_TOKEN), tls, ca, cert, key, serverName);
  }

  private static String get(Map<String, String> env, String name) {
    String v = env.get(name);
    return v == null || v.isEmpty() ? null : v;
  }
}
