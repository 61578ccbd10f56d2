package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.util.Collection;
import java.util.Map;
import java.util.Optional;

/**
 * Input schemas of typed tools, derived from a record class: each component is a property
 * (named by {@code @JsonProperty} when given), required unless it is an {@link Optional};
 * strings, numbers, booleans, enums, lists, maps and nested records map to their JSON Schema
 * types; {@link Description} describes a component.
 */
public final class Schemas {
  private Schemas() {}

  /** Describes a record component (or the tool's input type) in the schema. */
  @Retention(RetentionPolicy.RUNTIME)
  @Target({ElementType.RECORD_COMPONENT, ElementType.TYPE, ElementType.FIELD, ElementType.PARAMETER})
  public @interface Description {
    String value();
  }

  /** The object schema of record class type. */
  public static ObjectNode of(Class<?> type) {
    if (!type.isRecord()) {
      throw new IllegalArgumentException("toolbus: a typed tool's input must be a record, got " + type.getName());
    }
    return object(type, 0);
  }

  private static ObjectNode object(Class<?> type, int depth) {
    if (depth > 32) {
      throw new IllegalArgumentException("toolbus: input type " + type.getName() + " nests too deep (a cycle?)");
    }
    ObjectNode s = Json.MAPPER.createObjectNode().put("type", "object");
    ObjectNode props = s.putObject("properties");
    ArrayNode req = Json.MAPPER.createArrayNode();
    for (RecordComponent c : type.getRecordComponents()) {
      JsonProperty jp = c.getAnnotation(JsonProperty.class);
      String name = jp != null && !jp.value().isEmpty() ? jp.value() : c.getName();
      Type t = c.getGenericType();
      boolean optional = c.getType() == Optional.class;
      if (optional) {
        t = ((ParameterizedType) t).getActualTypeArguments()[0];
      }
      ObjectNode p = schema(t, depth);
      Description d = c.getAnnotation(Description.class);
      if (d != null) {
        p.put("description", d.value());
      }
      props.set(name, p);
      if (!optional) {
        req.add(name);
      }
    }
    if (!req.isEmpty()) {
      s.set("required", req);
    }
    return s;
  }

  private static ObjectNode schema(Type t, int depth) {
    ObjectNode s = Json.MAPPER.createObjectNode();
    Class<?> raw = t instanceof ParameterizedType pt ? (Class<?>) pt.getRawType() : (Class<?>) t;
    if (raw == String.class || raw == char.class || raw == Character.class) {
      return s.put("type", "string");
    }
    if (raw == boolean.class || raw == Boolean.class) {
      return s.put("type", "boolean");
    }
    if (raw == int.class || raw == long.class || raw == short.class || raw == byte.class
        || raw == Integer.class || raw == Long.class || raw == Short.class || raw == Byte.class
        || raw == java.math.BigInteger.class) {
      return s.put("type", "integer");
    }
    if (raw == double.class || raw == float.class || Number.class.isAssignableFrom(raw)) {
      return s.put("type", "number");
    }
    if (raw.isEnum()) {
      ArrayNode e = s.put("type", "string").putArray("enum");
      for (Object c : raw.getEnumConstants()) {
        e.add(((Enum<?>) c).name());
      }
      return s;
    }
    if (raw.isArray()) {
      s.put("type", "array").set("items", schema(raw.getComponentType(), depth + 1));
      return s;
    }
    if (Collection.class.isAssignableFrom(raw)) {
      s.put("type", "array");
      if (t instanceof ParameterizedType pt) {
        s.set("items", schema(pt.getActualTypeArguments()[0], depth + 1));
      }
      return s;
    }
    if (Map.class.isAssignableFrom(raw)) {
      s.put("type", "object");
      if (t instanceof ParameterizedType pt) {
        s.set("additionalProperties", schema(pt.getActualTypeArguments()[1], depth + 1));
      }
      return s;
    }
    if (raw.isRecord()) {
      return object(raw, depth + 1);
    }
    return s; // any JSON value
  }
}
