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
    return expirytime == null || expirytime.isEmpty() ? null : Attrs.parseTime("expirytime", expirytime);
  }

  /** Checks the required attributes and the identifiers present; throws bad_event. */
  public Event validate() {
    if (!Codes.SPEC_VERSION.equals(specversion)) {
      throw Attrs.bad("specversion must be \"1.0\", got " + Ids.quote(specversion));
    }
    if (id == null || id.isEmpty()) {
      throw Attrs.bad("id is empty");
    }
    if (source == null || source.isEmpty()) {
      throw Attrs.bad("source is empty");
    }
    if (type == null || type.isEmpty()) {
      throw Attrs.bad("type is empty");
    }
    if (datacontenttype != null && !datacontenttype.isEmpty() && !Attrs.isJson(datacontenttype)) {
      throw Attrs.bad("datacontenttype must be application/json, got " + Ids.quote(datacontenttype));
    }
    String[][] ids = {{"sessionid", sessionid}, {"replyid", replyid}, {"toolcallid", toolcallid}};
    for (String[] a : ids) {
      if (a[1] != null && !a[1].isEmpty() && !Ids.validId(a[1])) {
        throw Attrs.bad(a[0] + " " + Ids.quote(a[1]) + " must match ^[A-Za-z0-9_-]{1,128}$");
      }
    }
    if (time != null && !time.isEmpty()) {
      Attrs.parseTime("time", time);
    }
    expiry();
    return this;
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
      Attrs.field(g, "subject", subject);
      Attrs.field(g, "datacontenttype", datacontenttype);
      Attrs.field(g, "time", time);
      Attrs.field(g, "sessionid", sessionid);
      Attrs.field(g, "replyid", replyid);
      Attrs.field(g, "toolcallid", toolcallid);
      Attrs.field(g, "traceparent", traceparent);
      Attrs.field(g, "tracestate", tracestate);
      Attrs.field(g, "expirytime", expirytime);
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
      throw Attrs.bad("message is not a CloudEvent: " + Json.firstLine(e));
    }
    if (n == null || !n.isObject()) {
      throw Attrs.bad("message is not a JSON CloudEvent");
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
          throw Attrs.bad("data_base64 must be a string");
        }
        try {
          base64 = Base64.getDecoder().decode(v.asText());
        } catch (IllegalArgumentException ex) {
          throw Attrs.bad("data_base64: " + ex.getMessage());
        }
        continue;
      }
      if (!Attrs.isAttr(k)) {
        continue; // unknown extension attributes are ignored
      }
      if (!v.isTextual()) {
        if (v.isNull()) {
          continue;
        }
        throw Attrs.bad("message is not a CloudEvent: attribute " + k + " must be a string");
      }
      Attrs.set(e, k, v.asText());
    }
    if (base64 != null && base64.length > 0) {
      if (e.tree != null) {
        throw Attrs.bad("data and data_base64 are both set");
      }
      e.data = base64;
      e.tree = null;
    }
    return e.validate();
  }

  // ---- binary mode ----

  /** Reports whether a message carries its event in binary mode (ce- headers). */
  public static boolean isBinary(Message m) {
    return BinaryMode.isBinary(m);
  }

  /** Reads a message in either mode and validates the event; bad_event otherwise. */
  public static Event decode(Message m) {
    return BinaryMode.isBinary(m) ? BinaryMode.decode(m.getHeaders(), m.getData()) : decodeStructured(m.getData());
  }

  /** A NATS message to subject with the event in binary mode (ce- headers, the data as body). */
  public Message toBinaryMessage(String natsSubject, String replyTo) {
    return BinaryMode.message(this, natsSubject, replyTo);
  }

  @Override
  public String toString() {
    return new String(encode(), StandardCharsets.UTF_8);
  }
}
