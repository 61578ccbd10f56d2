package io.toolbus;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * One CloudEvent 1.0 with toolbus's extension attributes (docs/protocol.md 1), read from and
 * written to NATS messages in structured or binary mode. {@code data} holds the JSON data as
 * bytes, exactly as on the wire.
 */
public final class Event {
  public String specversion = Codes.SPEC_VERSION;
  public String id;
  public String source;
  public String type;
  public String subject;
  public String datacontenttype;
  public String time;
  public String sessionid;
  public String replyid;
  public String toolcallid;
  public String traceparent;
  public String tracestate;
  public String expirytime;
  /** The data as JSON bytes; null when absent (see {@link #data()}). */
  private byte[] data;
  /** The data as parsed when the event was decoded (structured mode), to spare a second parse. */
  private JsonNode tree;

  private static final JsonFactory FACTORY = Json.MAPPER.getFactory();
  private static final DateTimeFormatter TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", Locale.ROOT).withZone(ZoneOffset.UTC);
  private static final Pattern RFC3339 =
      Pattern.compile(
          "^\\d{4}-\\d{2}-\\d{2}[Tt]\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?([Zz]|[+-]\\d{2}:\\d{2})$");

  /** A new event of type from source with a fresh id, the time now and data encoded as JSON. */
  public static Event of(String type, String source, Object data) {
    Event e = new Event();
    e.id = Ids.next();
    e.source = source;
    e.type = type;
    e.datacontenttype = Codes.CONTENT_TYPE_JSON;
    e.time = now();
    e.setData(data);
    return e;
  }

  /** The current UTC time as toolbus stamps it: RFC 3339 with milliseconds. */
  public static String now() {
    return TIME.format(Instant.now());
  }

  /** The data as JSON bytes; null when absent. */
  public byte[] data() {
    if (data == null && tree != null) {
      data = Json.bytes(tree);
    }
    return data;
  }

  /** Reports whether the event has data. */
  public boolean hasData() {
    return tree != null || (data != null && data.length > 0);
  }

  /** Sets the data: null, raw JSON bytes, a JsonNode or any value Jackson encodes. */
  public Event setData(Object v) {
    if (v == null) {
      data = null;
      tree = null;
    } else if (v instanceof byte[] b) {
      data = b;
      tree = null;
    } else {
      data = Json.bytes(v);
      tree = v instanceof JsonNode n ? n : null;
    }
    return this;
  }

  /** The data as a JSON tree (NullNode when absent); bad_event when it is not JSON. */
  public JsonNode dataTree() {
    if (tree == null && (data == null || data.length == 0)) {
      return com.fasterxml.jackson.databind.node.NullNode.getInstance();
    }
    if (tree == null) {
      tree = Json.parse(data, Codes.BAD_EVENT, type + ": data");
    }
    return tree;
  }

  /** Decodes the data into type: bad_event for a missing data, the decoder's code otherwise. */
  public <T> T dataAs(Class<T> cls, String code) {
    if (!hasData()) {
      throw new BusException(Codes.BAD_EVENT, type + ": data is missing");
    }
    return Json.decode(dataTree(), cls, code, type + ": data");
  }

  /** The parsed expirytime, or null when absent. */
  public Instant expiry() {
    return expirytime == null || expirytime.isEmpty() ? null : parseTime("expirytime", expirytime);
  }

  static Instant parseTime(String what, String v) {
    try {
      if (!RFC3339.matcher(v).matches()) {
        throw new DateTimeParseException("no", v, 0);
      }
      return OffsetDateTime.parse(v.toUpperCase(Locale.ROOT)).toInstant();
    } catch (DateTimeParseException e) {
      throw new BusException(Codes.BAD_EVENT, what + " " + Ids.quote(v) + " is not RFC 3339");
    }
  }

  /** Checks the required attributes and the identifiers present; throws bad_event. */
  public Event validate() {
    if (!Codes.SPEC_VERSION.equals(specversion)) {
      throw bad("specversion must be \"1.0\", got " + Ids.quote(specversion));
    }
    if (id == null || id.isEmpty()) {
      throw bad("id is empty");
    }
    if (source == null || source.isEmpty()) {
      throw bad("source is empty");
    }
    if (type == null || type.isEmpty()) {
      throw bad("type is empty");
    }
    if (datacontenttype != null && !datacontenttype.isEmpty() && !isJson(datacontenttype)) {
      throw bad("datacontenttype must be application/json, got " + Ids.quote(datacontenttype));
    }
    String[][] ids = {{"sessionid", sessionid}, {"replyid", replyid}, {"toolcallid", toolcallid}};
    for (String[] a : ids) {
      if (a[1] != null && !a[1].isEmpty() && !Ids.validId(a[1])) {
        throw bad(a[0] + " " + Ids.quote(a[1]) + " must match ^[A-Za-z0-9_-]{1,128}$");
      }
    }
    if (time != null && !time.isEmpty()) {
      parseTime("time", time);
    }
    expiry();
    return this;
  }

  static boolean isJson(String ct) {
    String mt = ct;
    int semi = mt.indexOf(';');
    if (semi >= 0) {
      mt = mt.substring(0, semi);
    }
    mt = mt.trim().toLowerCase(Locale.ROOT);
    return mt.equals("application/json") || mt.endsWith("+json") || mt.equals("text/json");
  }

  private static BusException bad(String m) {
    return new BusException(Codes.BAD_EVENT, m);
  }

  // ---- structured mode ----

  /** The event in structured JSON mode. */
  public byte[] encode() {
    ByteArrayOutputStream out = new ByteArrayOutputStream(256 + (data == null ? 0 : data.length));
    try (JsonGenerator g = FACTORY.createGenerator(out)) {
      g.writeStartObject();
      g.writeStringField("specversion", specversion);
      g.writeStringField("id", id == null ? "" : id);
      g.writeStringField("source", source == null ? "" : source);
      g.writeStringField("type", type == null ? "" : type);
      field(g, "subject", subject);
      field(g, "datacontenttype", datacontenttype);
      field(g, "time", time);
      field(g, "sessionid", sessionid);
      field(g, "replyid", replyid);
      field(g, "toolcallid", toolcallid);
      field(g, "traceparent", traceparent);
      field(g, "tracestate", tracestate);
      field(g, "expirytime", expirytime);
      if (data == null && tree != null) {
        g.writeFieldName("data");
        g.writeTree(tree);
      } else if (data != null && data.length > 0) {
        g.writeFieldName("data");
        g.writeRawValue(new String(data, StandardCharsets.UTF_8));
      }
      g.writeEndObject();
    } catch (IOException e) {
      throw new IllegalStateException("toolbus: encode " + type + ": " + e.getMessage(), e);
    }
    return out.toByteArray();
  }

  private static void field(JsonGenerator g, String k, String v) throws IOException {
    if (v != null && !v.isEmpty()) {
      g.writeStringField(k, v);
    }
  }

  /** A NATS message to subject with the event in structured mode. */
  public Message toMessage(String natsSubject, String replyTo) {
    Headers h = new Headers();
    h.put("content-type", Codes.CONTENT_TYPE_EVENT);
    if (traceparent != null && !traceparent.isEmpty()) {
      h.put("traceparent", traceparent);
      if (tracestate != null && !tracestate.isEmpty()) {
        h.put("tracestate", tracestate);
      }
    }
    return NatsMessage.builder().subject(natsSubject).replyTo(replyTo).headers(h).data(encode()).build();
  }

  /** Reads and validates an event in structured JSON mode; bad_event otherwise. */
  public static Event decodeStructured(byte[] b) {
    JsonNode n;
    try {
      n = b == null ? null : Json.MAPPER.readTree(b);
    } catch (IOException e) {
      throw bad("message is not a CloudEvent: " + Json.firstLine(e));
    }
    if (n == null || !n.isObject()) {
      throw bad("message is not a JSON CloudEvent");
    }
    Event e = new Event();
    e.specversion = null;
    Iterator<Map.Entry<String, JsonNode>> it = n.fields();
    byte[] base64 = null;
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> f = it.next();
      String k = f.getKey();
      JsonNode v = f.getValue();
      if (k.equals("data")) {
        e.data = null;
        e.tree = v.isNull() ? null : v;
        continue;
      }
      if (k.equals("data_base64")) {
        if (!v.isTextual()) {
          throw bad("data_base64 must be a string");
        }
        try {
          base64 = Base64.getDecoder().decode(v.asText());
        } catch (IllegalArgumentException ex) {
          throw bad("data_base64: " + ex.getMessage());
        }
        continue;
      }
      if (!isAttr(k)) {
        continue; // unknown extension attributes are ignored
      }
      if (!v.isTextual()) {
        if (v.isNull()) {
          continue;
        }
        throw bad("message is not a CloudEvent: attribute " + k + " must be a string");
      }
      e.set(k, v.asText());
    }
    if (base64 != null && base64.length > 0) {
      if (e.tree != null) {
        throw bad("data and data_base64 are both set");
      }
      e.data = base64;
      e.tree = null;
    }
    return e.validate();
  }

  private static boolean isAttr(String k) {
    switch (k) {
      case "specversion", "id", "source", "type", "subject", "datacontenttype", "time",
          "sessionid", "replyid", "toolcallid", "traceparent", "tracestate", "expirytime":
        return true;
      default:
        return false;
    }
  }

  private void set(String k, String v) {
    switch (k) {
      case "specversion" -> specversion = v;
      case "id" -> id = v;
      case "source" -> source = v;
      case "type" -> type = v;
      case "subject" -> subject = v;
      case "datacontenttype" -> datacontenttype = v;
      case "time" -> time = v;
      case "sessionid" -> sessionid = v;
      case "replyid" -> replyid = v;
      case "toolcallid" -> toolcallid = v;
      case "traceparent" -> traceparent = v;
      case "tracestate" -> tracestate = v;
      case "expirytime" -> expirytime = v;
      default -> {}
    }
  }

  // ---- binary mode ----

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

  /** Reads a message in either mode and validates the event; bad_event otherwise. */
  public static Event decode(Message m) {
    return isBinary(m) ? decodeBinary(m.getHeaders(), m.getData()) : decodeStructured(m.getData());
  }

  static Event decodeBinary(Headers h, byte[] body) {
    Event e = new Event();
    e.specversion = null;
    Map<String, String[]> seen = new HashMap<>(); // attribute -> {header, value}
    for (String k : h.keySet()) {
      List<String> vs = h.get(k);
      if (vs == null || vs.isEmpty()) {
        continue;
      }
      String lk = k.toLowerCase(Locale.ROOT);
      String name;
      String v;
      if (lk.equals("content-type")) {
        name = "datacontenttype";
        v = vs.get(0);
      } else if (lk.startsWith("ce-")) {
        name = lk.substring(3);
        v = percentDecode(k, vs.get(0));
      } else {
        continue;
      }
      String[] p = seen.get(name);
      if (p != null) {
        if (!p[1].equals(v)) {
          String a = p[0].compareTo(k) < 0 ? p[0] : k;
          String b = p[0].compareTo(k) < 0 ? k : p[0];
          throw bad("attribute " + name + " is given twice with different values, by headers " + a + " and " + b);
        }
        continue;
      }
      seen.put(name, new String[] {k, v});
      e.set(name, v);
    }
    if (body == null || new String(body, StandardCharsets.UTF_8).isBlank()) {
      e.data = null;
    } else {
      e.tree = Json.parse(body, Codes.BAD_EVENT, "binary-mode data");
      e.data = body;
    }
    return e.validate();
  }

  /** Percent-decodes a header value ('+' stays '+'); the result must be UTF-8. */
  static String percentDecode(String header, String v) {
    byte[] raw = v.getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream out = new ByteArrayOutputStream(raw.length);
    for (int i = 0; i < raw.length; i++) {
      byte c = raw[i];
      if (c == '%') {
        if (i + 2 >= raw.length || hex(raw[i + 1]) < 0 || hex(raw[i + 2]) < 0) {
          throw bad("header " + header + ": invalid URL escape " + Ids.quote(v.substring(Math.min(i, v.length()))));
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
      throw bad("header " + header + " is not UTF-8");
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

  /** A NATS message to subject with the event in binary mode (ce- headers, the data as body). */
  public Message toBinaryMessage(String natsSubject, String replyTo) {
    Headers h = new Headers();
    String[][] attrs = {
      {"ce-specversion", specversion}, {"ce-id", id}, {"ce-source", source}, {"ce-type", type},
      {"ce-subject", subject}, {"ce-time", time}, {"ce-sessionid", sessionid},
      {"ce-replyid", replyid}, {"ce-toolcallid", toolcallid}, {"ce-traceparent", traceparent},
      {"ce-tracestate", tracestate}, {"ce-expirytime", expirytime}
    };
    for (String[] a : attrs) {
      if (a[1] != null && !a[1].isEmpty()) {
        h.put(a[0], percentEncode(a[1]));
      }
    }
    h.put("content-type", datacontenttype == null || datacontenttype.isEmpty() ? Codes.CONTENT_TYPE_JSON : datacontenttype);
    if (traceparent != null && !traceparent.isEmpty()) {
      h.put("traceparent", traceparent);
      if (tracestate != null && !tracestate.isEmpty()) {
        h.put("tracestate", tracestate);
      }
    }
    return NatsMessage.builder().subject(natsSubject).replyTo(replyTo).headers(h)
        .data(data() == null ? new byte[0] : data()).build();
  }

  @Override
  public String toString() {
    return new String(encode(), StandardCharsets.UTF_8);
  }
}
