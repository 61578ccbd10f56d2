package io.toolbus;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.exc.MismatchedInputException;
import com.fasterxml.jackson.databind.exc.UnrecognizedPropertyException;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.NullNode;
import java.io.IOException;

/**
 * The one JSON mapper of the library. Types the protocol decodes strictly (docs/protocol.md 7.4:
 * definitions, groups, answers, requests, output blocks, rules) use it as is, so an unknown member
 * is refused with its name; lenient types carry {@code @JsonIgnoreProperties(ignoreUnknown = true)}.
 */
public final class Json {
  /** The shared mapper: unknown members fail, nulls are left out when writing. */
  public static final ObjectMapper MAPPER =
      new ObjectMapper()
          .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, true)
          .configure(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES, true)
          .configure(DeserializationFeature.ACCEPT_FLOAT_AS_INT, false)
          .configure(com.fasterxml.jackson.databind.MapperFeature.AUTO_DETECT_IS_GETTERS, false)
          .setSerializationInclusion(JsonInclude.Include.NON_NULL);

  private Json() {}

  /** The empty object {@code {}}. */
  public static JsonNode emptyObject() {
    return JsonNodeFactory.instance.objectNode();
  }

  /** Parses text as JSON; a failure is a {@link BusException} with code, naming what. */
  public static JsonNode parse(byte[] b, String code, String what) {
    try {
      JsonNode n = MAPPER.readTree(b);
      return n == null ? NullNode.getInstance() : n;
    } catch (IOException e) {
      throw new BusException(code, what + " is not JSON: " + firstLine(e));
    }
  }

  /** Decodes node into type; a failure is a {@link BusException} with code naming the member. */
  public static <T> T decode(JsonNode node, Class<T> type, String code, String what) {
    try {
      return MAPPER.treeToValue(node, type);
    } catch (UnrecognizedPropertyException e) {
      throw new BusException(code, what + ": unknown member \"" + e.getPropertyName() + "\"");
    } catch (MismatchedInputException e) {
      throw new BusException(code, what + ": " + pathOf(e) + firstLine(e));
    } catch (JsonProcessingException | IllegalArgumentException e) {
      throw new BusException(code, what + ": " + firstLine(e));
    }
  }

  /** Encodes v as JSON bytes. */
  public static byte[] bytes(Object v) {
    try {
      return MAPPER.writeValueAsBytes(v);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("toolbus: value does not encode as JSON: " + firstLine(e), e);
    }
  }

  /** Encodes v as a JSON tree. */
  public static JsonNode tree(Object v) {
    return MAPPER.valueToTree(v);
  }

  /** Compact JSON text of v. */
  public static String text(Object v) {
    return new String(bytes(v), java.nio.charset.StandardCharsets.UTF_8);
  }

  private static String pathOf(MismatchedInputException e) {
    StringBuilder b = new StringBuilder();
    for (var r : e.getPath()) {
      if (r.getFieldName() != null) {
        b.append(b.length() == 0 ? "" : ".").append(r.getFieldName());
      } else if (r.getIndex() >= 0) {
        b.append('[').append(r.getIndex()).append(']');
      }
    }
    return b.length() == 0 ? "" : "member \"" + b + "\": ";
  }

  static String firstLine(Exception e) {
    String m = e instanceof JsonProcessingException j ? j.getOriginalMessage() : e.getMessage();
    if (m == null) {
      return e.getClass().getSimpleName();
    }
    int nl = m.indexOf('\n');
    return nl < 0 ? m : m.substring(0, nl);
  }
}
