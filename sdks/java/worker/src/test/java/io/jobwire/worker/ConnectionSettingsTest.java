package io.jobwire.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.UncheckedIOException;
import java.util.Map;
import org.junit.jupiter.api.Test;

class ConnectionSettingsTest {
  @Test
  void unsetVariablesLeaveTheDefaults() {
    assertEquals(new ConnectionSettings("127.0.0.1:7070", null, false, null, null, null, null), ConnectionSettings.fromEnv(Map.of()));
    assertEquals(new ConnectionSettings("127.0.0.1:7070", null, false, null, null, null, null),
        ConnectionSettings.fromEnv(Map.of("JOBWIRE_ADDR", "", "JOBWIRE_TLS", "false")));
  }

  @Test
  void everyVariableIsRead() {
    ConnectionSettings s = ConnectionSettings.fromEnv(Map.of(
        "JOBWIRE_ADDR", "broker.internal:7070",
        "JOBWIRE_TOKEN", "jw_1_secret",
        "JOBWIRE_TLS_CA", "ca.pem",
        "JOBWIRE_TLS_CERT", "client.pem",
        "JOBWIRE_TLS_KEY", "client-key.pem",
        "JOBWIRE_TLS_SERVER_NAME", "broker"));
    assertEquals(new ConnectionSettings("broker.internal:7070", "jw_1_secret", true, "ca.pem", "client.pem", "client-key.pem", "broker"), s);
  }

  @Test
  void anyTlsSettingImpliesTls() {
    assertTrue(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TLS", "true")).tls());
    assertTrue(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TLS_CA", "ca.pem")).tls());
    assertTrue(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TLS_SERVER_NAME", "broker")).tls());
  }

  @Test
  void settingsThatCannotWorkFailAtBuildNamingTheVariable() {
    var e = assertThrows(IllegalArgumentException.class,
        () -> Worker.builder().settings(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TLS_CERT", "client.pem"))).build());
    assertTrue(e.getMessage().contains("JOBWIRE_TLS_KEY"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> Worker.builder().settings(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TOKEN", "two words"))).build());
    assertTrue(e.getMessage().contains("JOBWIRE_TOKEN"), e.getMessage());
    var io = assertThrows(UncheckedIOException.class,
        () -> Worker.builder().settings(ConnectionSettings.fromEnv(Map.of("JOBWIRE_TLS_CA", "/nonexistent/ca.pem"))).build());
    assertTrue(io.getMessage().contains("JOBWIRE_TLS_CA"), io.getMessage());
  }
}
