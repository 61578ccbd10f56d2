package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Message;
import io.nats.client.Subscription;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Red team, session 25 (docs/security.md): forged compact execs, written as raw NATS protocol so
 * that header bytes and repeated header lines reach jnats as an attacker sends them, are each
 * answered bad_event by a real Java worker without running its tool: a header line repeated with
 * another value (jnats keeps both; the first was taken), an expirytime of February 30, a missing
 * id, non-object data. (A header byte that is not ASCII is refused by jnats itself, whose
 * connection then reads nothing more: routers write none, test/embedded TestAttackTraceHeaderNotASCII.)
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CompactExecAttackTest {
  /** Header lines of a compact exec, with over's replacing (a null value drops the line). */
  static List<byte[][]> compact(Map<String, byte[]> over) {
    Map<String, byte[]> h = new LinkedHashMap<>();
    h.put("ce-specversion", b("1.0"));
    h.put("ce-id", b("x1"));
    h.put("ce-source", b("toolbus/router/r"));
    h.put("ce-type", b(Codes.EXEC));
    h.put("ce-sessionid", b("s1"));
    h.put("ce-replyid", b("r1"));
    h.put("ce-toolcallid", b("c1"));
    h.put("ce-expirytime", b(Instant.now().plusSeconds(30).toString()));
    h.putAll(over);
    List<byte[][]> out = new ArrayList<>();
    h.forEach((k, v) -> {
      if (v != null) {
        out.add(new byte[][] {b(k), v});
      }
    });
    return out;
  }

  static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** Publishes one message with exactly these header lines from a raw connection; its reply comes to the subscription of nc returned. */
  static Subscription rawRequest(String url, Connection nc, String subject, List<byte[][]> headers, byte[] body) throws Exception {
    String inbox = nc.createInbox();
    Subscription sub = nc.subscribe(inbox);
    nc.flush(Duration.ofSeconds(10));
    URI u = URI.create(url);
    try (Socket s = new Socket(u.getHost(), u.getPort())) {
      BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.ISO_8859_1));
      in.readLine(); // INFO
      ByteArrayOutputStream hdr = new ByteArrayOutputStream();
      hdr.write(b("NATS/1.0\r\n"));
      for (byte[][] kv : headers) {
        hdr.write(kv[0]);
        hdr.write(b(": "));
        hdr.write(kv[1]);
        hdr.write(b("\r\n"));
      }
      hdr.write(b("\r\n"));
      OutputStream out = s.getOutputStream();
      out.write(b("CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true}\r\n"));
      out.write(b("HPUB " + subject + " " + inbox + " " + hdr.size() + " " + (hdr.size() + body.length) + "\r\n"));
      out.write(hdr.toByteArray());
      out.write(body);
      out.write(b("\r\nPING\r\n"));
      out.flush();
      assertEquals("PONG", in.readLine());
    }
    return sub;
  }

  static Message answer(Subscription sub) throws InterruptedException {
    Message m = sub.nextMessage(Duration.ofSeconds(10));
    assertNotNull(m, "no answer on " + sub.getSubject());
    return m;
  }

  @Test
  void forgedCompactExecsRefused() throws Exception {
    Router router = Router.shared();
    String tool = "j_attack_" + Ids.next();
    AtomicInteger ran = new AtomicInteger();
    try (Connection nc = router.connect()) {
      Worker w = Worker.builder(nc).id("jatk-" + Ids.next()).heartbeat(Duration.ofSeconds(1)).build();
      w.tool(ToolDef.builder(tool).description("Count words.").readOnly(true).inputSchema(Map.of("type", "object")).build(),
          c -> {
            ran.incrementAndGet();
            return String.valueOf(c.input().path("text").asText().split(" ").length);
          });
      w.start();
      String subject = "toolbus.exec." + tool;
      byte[] body = b("{\"call\":{\"id\":\"c1\",\"name\":\"" + tool + "\",\"input\":{\"text\":\"a b\"}},\"attempt\":1}");
      Message ok = answer(rawRequest(router.url(), nc, subject, compact(Map.of()), body));
      assertEquals("{\"state\":\"success\",\"output\":[{\"type\":\"text\",\"text\":\"2\"}]}", new String(ok.getData()));
      assertEquals(1, ran.get());
      List<byte[][]> repeated = compact(Map.of());
      repeated.add(new byte[][] {b("ce-toolcallid"), b("c2")});
      List<byte[][]> repeatedSession = compact(Map.of());
      repeatedSession.add(new byte[][] {b("ce-sessionid"), b("victim")});
      Map<String, byte[]> noId = new LinkedHashMap<>();
      noId.put("ce-id", null);
      Object[][] cases = {
        {"given twice", repeated, body},
        {"given twice", repeatedSession, body},
        {"expirytime", compact(Map.of("ce-expirytime", b("2030-02-30T00:00:00Z"))), body},
        {"id", compact(noId), body},
        {"", compact(Map.of()), b("[1]")},
        {"", compact(Map.of()), b("\"call\"")},
      };
      for (Object[] c : cases) {
        @SuppressWarnings("unchecked")
        Message m = answer(rawRequest(router.url(), nc, subject, (List<byte[][]>) c[1], (byte[]) c[2]));
        Event e = Event.decode(m);
        assertEquals(Codes.ERROR, e.type, c[0] + ": " + new String(m.getData()));
        assertEquals(Codes.BAD_EVENT, e.dataTree().path("code").asText(), c[0] + ": " + new String(m.getData()));
        assertTrue(e.dataTree().path("message").asText().contains((String) c[0]), c[0] + ": " + new String(m.getData()));
      }
      assertEquals(1, ran.get(), "a forged exec ran the tool");
      w.drain(Duration.ofSeconds(5));
    }
  }
}
