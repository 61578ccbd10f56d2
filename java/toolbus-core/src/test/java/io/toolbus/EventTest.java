package io.toolbus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;

/** The CloudEvents codec: both modes, and every bad input refused with bad_event and a reason. */
class EventTest {
  static final String OK = "{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"s\",\"type\":\"t\"";

  static Stream<Arguments> badStructured() {
    return Stream.of(
        Arguments.of("", "message is not a JSON CloudEvent"),
        Arguments.of("[1]", "message is not a JSON CloudEvent"),
        Arguments.of("{", "message is not a CloudEvent"),
        Arguments.of("{\"id\":\"x\",\"source\":\"s\",\"type\":\"t\"}", "specversion must be \"1.0\", got null"),
        Arguments.of("{\"specversion\":\"0.3\",\"id\":\"x\",\"source\":\"s\",\"type\":\"t\"}", "specversion must be \"1.0\""),
        Arguments.of("{\"specversion\":\"1.0\",\"id\":\"\",\"source\":\"s\",\"type\":\"t\"}", "id is empty"),
        Arguments.of("{\"specversion\":\"1.0\",\"id\":\"x\",\"type\":\"t\"}", "source is empty"),
        Arguments.of("{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"s\"}", "type is empty"),
        Arguments.of(OK + ",\"sessionid\":\"a.b\"}", "sessionid \"a.b\" must match"),
        Arguments.of(OK + ",\"replyid\":\"" + "r".repeat(129) + "\"}", "replyid"),
        Arguments.of(OK + ",\"toolcallid\":\"a b\"}", "toolcallid"),
        Arguments.of(OK + ",\"time\":\"yesterday\"}", "time \"yesterday\" is not RFC 3339"),
        Arguments.of(OK + ",\"expirytime\":\"2026-12-01T10:00Z\"}", "expirytime"),
        Arguments.of(OK + ",\"datacontenttype\":\"text/plain\"}", "datacontenttype must be application/json"),
        Arguments.of(OK + ",\"data\":{},\"data_base64\":\"e30=\"}", "data and data_base64 are both set"),
        Arguments.of(OK + ",\"data_base64\":\"!!\"}", "data_base64"),
        Arguments.of(OK + ",\"id\":7}", "attribute id must be a string"));
  }

  @ParameterizedTest
  @MethodSource("badStructured")
  void structuredRefusals(String body, String why) {
    BusException e = assertThrows(BusException.class, () -> Event.decodeStructured(body.getBytes(StandardCharsets.UTF_8)));
    assertEquals(Codes.BAD_EVENT, e.code());
    assertEquals(true, e.getMessage().contains(why), e.getMessage());
  }

  @Test
  void structuredRoundTrip() {
    Event e = Event.of(Codes.CALL_BATCH, "agent ü", Map.of("calls", java.util.List.of()));
    e.sessionid = "s1";
    e.expirytime = "2026-12-01T10:00:00.123456789+02:00";
    Event d = Event.decodeStructured(e.encode());
    assertEquals("agent ü", d.source);
    assertEquals(e.expirytime, d.expirytime);
    assertEquals("{\"calls\":[]}", new String(d.data(), StandardCharsets.UTF_8));
    assertEquals("{\"x\":1}", new String(Event.decodeStructured((OK + ",\"data_base64\":\"eyJ4IjoxfQ==\"}").getBytes(StandardCharsets.UTF_8)).data(), StandardCharsets.UTF_8));
  }

  static Stream<Arguments> badBinary() {
    return Stream.of(
        Arguments.of(new String[] {"ce-sessionid", "%FF"}, "{}", "header ce-sessionid is not UTF-8"),
        Arguments.of(new String[] {"ce-sessionid", "%4"}, "{}", "invalid URL escape"),
        Arguments.of(new String[] {"Ce-Id", "other"}, "{}", "attribute id is given twice with different values"),
        Arguments.of(new String[] {"ce-datacontenttype", "text/json"}, "{}", "attribute datacontenttype is given twice"),
        Arguments.of(new String[] {"ce-x", "y"}, "not json", "binary-mode data is not JSON"));
  }

  @ParameterizedTest
  @MethodSource("badBinary")
  void binaryRefusals(String[] extra, String body, String why) {
    Headers h = new Headers().put("ce-specversion", "1.0").put("ce-id", "x").put("ce-source", "s")
        .put("ce-type", "t").put("content-type", "application/json").put(extra[0], extra[1]);
    BusException e = assertThrows(BusException.class, () -> BinaryMode.decode(h, body.getBytes(StandardCharsets.UTF_8)));
    assertEquals(Codes.BAD_EVENT, e.code());
    assertEquals(true, e.getMessage().contains(why), e.getMessage());
  }

  @Test
  void binaryRoundTripPercentEncodes() {
    Event e = Event.of(Codes.EXEC_RESULT, "toolbus/worker/w 1 ü+%", Map.of("state", "success"));
    e.sessionid = "s1";
    var m = e.toBinaryMessage("x", null);
    assertEquals("toolbus/worker/w%201%20%C3%BC+%25", m.getHeaders().getFirst("ce-source"));
    Event d = Event.decode(m);
    assertEquals(e.source, d.source);
    assertEquals("s1", d.sessionid);
    assertArrayEquals(e.data(), d.data());
    Headers same = new Headers().put("ce-specversion", "1.0").put("ce-id", "x").put("Ce-Id", "x").put("ce-source", "s").put("ce-type", "t");
    assertEquals("x", BinaryMode.decode(same, new byte[0]).id);
  }
}
