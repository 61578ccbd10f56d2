package io.toolbus;

import com.fasterxml.jackson.core.JsonGenerator;
import java.io.IOException;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.Locale;
import java.util.regex.Pattern;

/** The CloudEvent attributes of docs/protocol.md 1: names, times, content types. */
final class Attrs {
  private static final Pattern RFC3339 =
      Pattern.compile(
          "^\\d{4}-\\d{2}-\\d{2}[Tt]\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?([Zz]|[+-]\\d{2}:\\d{2})$");

  private Attrs() {}

  static BusException bad(String m) {
    return new BusException(Codes.BAD_EVENT, m);
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

  static boolean isJson(String ct) {
    String mt = ct;
    int semi = mt.indexOf(';');
    if (semi >= 0) {
      mt = mt.substring(0, semi);
    }
    mt = mt.trim().toLowerCase(Locale.ROOT);
    return mt.equals("application/json") || mt.endsWith("+json") || mt.equals("text/json");
  }

  static void field(JsonGenerator g, String k, String v) throws IOException {
    if (v != null && !v.isEmpty()) {
      g.writeStringField(k, v);
    }
  }

  static boolean isAttr(String k) {
    switch (k) {
      case "specversion", "id", "source", "type", "subject", "datacontenttype", "time",
          "sessionid", "replyid", "toolcallid", "traceparent", "tracestate", "expirytime":
        return true;
      default:
        return false;
    }
  }

  static void set(Event e, String k, String v) {
    switch (k) {
      case "specversion" -> e.specversion = v;
      case "id" -> e.id = v;
      case "source" -> e.source = v;
      case "type" -> e.type = v;
      case "subject" -> e.subject = v;
      case "datacontenttype" -> e.datacontenttype = v;
      case "time" -> e.time = v;
      case "sessionid" -> e.sessionid = v;
      case "replyid" -> e.replyid = v;
      case "toolcallid" -> e.toolcallid = v;
      case "traceparent" -> e.traceparent = v;
      case "tracestate" -> e.tracestate = v;
      case "expirytime" -> e.expirytime = v;
      default -> {}
    }
  }

}
