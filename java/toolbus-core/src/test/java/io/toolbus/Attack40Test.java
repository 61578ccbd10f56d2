package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.ServerSocket;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Session 40's red team of the Java SDK: secrets in what it throws (docs/security.md). */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class Attack40Test {
  /**
   * A worker or client connecting with the password or token in its url to a server it cannot
   * reach: jnats' IOException names the url as given ("Unable to connect to NATS servers:
   * [nats://alice:s3cretpw@...]"), and a program prints or logs it. What Worker.connect and
   * ToolbusClient.connect throw names it redacted.
   */
  @Test
  void connectFailureNamesNoSecret() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort(); // closed again: nothing listens there
    }
    for (String url : List.of("nats://alice:s3cretpw@127.0.0.1:" + port, "nats://tok3nsecret@127.0.0.1:" + port)) {
      for (int i = 0; i < 2; i++) {
        boolean worker = i == 0;
        IOException e = assertThrows(IOException.class, () -> {
          if (worker) {
            Worker.connect(url);
          } else {
            ToolbusClient.connect(url);
          }
        });
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        assertTrue(!trace.toString().contains("s3cretpw") && !trace.toString().contains("tok3nsecret"), trace.toString());
        assertTrue(e.getMessage().contains("127.0.0.1:" + port) && e.getMessage().contains("xxxxx@"), e.getMessage());
      }
    }
  }

  @Test
  void redact() {
    assertEquals("nats://alice:xxxxx@h:4222", Urls.redact("nats://alice:s3cret@h:4222"));
    assertEquals("nats://xxxxx@h", Urls.redact("nats://tok3n@h"));
    assertEquals("nats://h:4222", Urls.redact("nats://h:4222"));
    assertEquals("tls://a:xxxxx@h1,nats://xxxxx@h2", Urls.redact("tls://a:p1@h1,nats://t2@h2"));
    assertEquals("Unable to connect to NATS servers: [nats://a:xxxxx@h:1, nats://xxxxx@h:2]",
        Urls.redact("Unable to connect to NATS servers: [nats://a:p@h:1, nats://t@h:2]"));
    assertEquals("nats://a:xxxxx@h", Urls.redact("nats://a:p:q@h"));
  }
}
