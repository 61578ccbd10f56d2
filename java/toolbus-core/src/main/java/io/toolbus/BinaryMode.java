package io.toolbus;

import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * CloudEvents binary mode (docs/protocol.md 1, 5.1): attributes as ce- headers, read
 * case-insensitively and percent-decoded; a value that is not UTF-8, or an attribute given twice
 * with different values, is bad_event.
 */
final class BinaryMode {
  private BinaryMode() {}

  /** Reports whether a message carries its event in binary mode (ce- headers). */
  public static boolean isBinary(Message m) {
    if (!m.hasHeaders()) {
      return false;
    }
    for (String k : m.getHeaders().keySet()) {
      if (k.length() > 3 && k.regionMatches(true, 0, "ce-", 0, 3)) {
        return true;
      }
    }
    return false;
  }

  static Event decode(Headers h, byte[] body) {
    Event e = new Event();
    e.specversion = null;
    Map<String, String[]> seen = new HashMap<>(); // attribute -> {header, value}
    for (String k : h.keySet()) {
      List<String> vs = h.get(k);
      if (vs == null || vs.isEmpty()) {
        continue;
      }
      String lk = k.toLowerCase(Locale.ROOT);
      boolean ce = lk.startsWith("ce-");
      if (!ce && !lk.equals("content-type")) {
        continue;
      }
      String name = ce ? lk.substring(3) : "datacontenttype";
      String v = value(k, vs.get(0), ce);
      for (String again : vs.subList(1, vs.size())) { // a header line repeated: an attribute given twice
        if (!again.equals(vs.get(0)) && !value(k, again, ce).equals(v)) {
          throw Attrs.bad("header " + k + " is given twice with different values");
        }
      }
      String[] p = seen.get(name);
      if (p != null) {
        if (!p[1].equals(v)) {
          String a = p[0].compareTo(k) < 0 ? p[0] : k;
          String b = p[0].compareTo(k) < 0 ? k : p[0];
          throw Attrs.bad("attribute " + name + " is given twice with different values, by headers " + a + " and " + b);
        }
        continue;
      }
      seen.put(name, new String[] {k, v});
      Attrs.set(e, name, v);
    }
    if (body == null || new String(body, StandardCharsets.UTF_8).isBlank()) {
      e.setData(null);
    } else {
      Json.parse(body, Codes.BAD_EVENT, "binary-mode data");
      e.setData(body);
    }
    return e.validate();
  }

  /** A header value as received: a ce- header's percent-decoded. */
  private static String value(String header, String raw, boolean ce) {
    return ce ? percentDecode(header, raw) : raw;
  }

  /** Percent-decodes a header value ('+' stays '+'); the result must be UTF-8. */
  static String percentDecode(String header, String v) {
    byte[] raw = v.getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream out = new ByteArrayOutputStream(raw.length);
    for (int i = 0; i < raw.length; i++) {
      byte c = raw[i];
      if (c == '%') {
        if (i + 2 >= raw.length || hex(raw[i + 1]) < 0 || hex(raw[i + 2]) < 0) {
          throw Attrs.bad("header " + header + ": invalid URL escape " + Ids.quote(v.substring(Math.min(i, v.length()))));
        }
        out.write(hex(raw[i + 1]) << 4 | hex(raw[i + 2]));
        i += 2;
      } else {
        out.write(c);
      }
    }
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(out.toByteArray()))
          .toString();
    } catch (CharacterCodingException ex) {
      throw Attrs.bad("header " + header + " is not UTF-8");
    }
  }

  private static int hex(byte c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /** Percent-encodes every byte outside [A-Za-z0-9-_.~:/+]. */
  static String percentEncode(String v) {
    StringBuilder b = new StringBuilder(v.length());
    for (byte c : v.getBytes(StandardCharsets.UTF_8)) {
      if (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
          || c == '-' || c == '_' || c == '.' || c == '~' || c == ':' || c == '/' || c == '+') {
        b.append((char) c);
      } else {
        b.append('%').append(Character.toUpperCase(Character.forDigit((c >> 4) & 0xf, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
      }
    }
    return b.toString();
  }

  /** A NATS message to subject with e in binary mode (ce- headers, the data as body). */
  static Message message(Event e, String natsSubject, String replyTo) {
    Headers h = new Headers();
    String[][] attrs = {
      {"ce-specversion", e.specversion}, {"ce-id", e.id}, {"ce-source", e.source}, {"ce-type", e.type},
      {"ce-subject", e.subject}, {"ce-time", e.time}, {"ce-sessionid", e.sessionid},
      {"ce-replyid", e.replyid}, {"ce-toolcallid", e.toolcallid}, {"ce-traceparent", e.traceparent},
      {"ce-tracestate", e.tracestate}, {"ce-expirytime", e.expirytime}
    };
    for (String[] a : attrs) {
      if (a[1] != null && !a[1].isEmpty()) {
        h.put(a[0], percentEncode(a[1]));
      }
    }
    h.put("content-type", e.datacontenttype == null || e.datacontenttype.isEmpty() ? Codes.CONTENT_TYPE_JSON : e.datacontenttype);
    if (e.traceparent != null && !e.traceparent.isEmpty()) {
      h.put("traceparent", e.traceparent);
      if (e.tracestate != null && !e.tracestate.isEmpty()) {
        h.put("tracestate", e.tracestate);
      }
    }
    return NatsMessage.builder().subject(natsSubject).replyTo(replyTo).headers(h)
        .data(e.data() == null ? new byte[0] : e.data()).build();
  }

  /**
   * Reports whether m, whose event decoded to e, came in the compact form (5.1, protocol 1.16):
   * binary mode without a content type.
   */
  static boolean isCompact(Message m, Event e) {
    return (e.datacontenttype == null || e.datacontenttype.isEmpty()) && isBinary(m);
  }

  /**
   * A NATS message to subject with e in the compact form (5.2, protocol 1.16): the four
   * attributes CloudEvents requires and the data as body; the request's own inbox says which
   * call a result answers.
   */
  static Message compactMessage(Event e, String natsSubject) {
    Headers h = new Headers();
    h.put("ce-specversion", percentEncode(e.specversion));
    h.put("ce-id", percentEncode(e.id));
    h.put("ce-source", percentEncode(e.source));
    h.put("ce-type", percentEncode(e.type));
    return NatsMessage.builder().subject(natsSubject).headers(h).data(e.data() == null ? new byte[0] : e.data()).build();
  }

}
