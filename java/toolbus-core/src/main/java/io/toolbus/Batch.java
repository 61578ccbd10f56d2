package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/** The data of io.toolbus.call.batch (docs/protocol.md 3.1). */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Batch(
    List<Call> calls, JsonNode user, JsonNode context, Request request, String events, Long sessionrev) {

  public static Builder builder() {
    return new Builder();
  }

  /** Builds a batch call by call. */
  public static final class Builder {
    private final List<Call> calls = new ArrayList<>();
    private JsonNode user;
    private JsonNode context;
    private Request request;
    private String events;

    public Builder call(String id, String name, Object input) {
      calls.add(Call.of(id, name, input));
      return this;
    }

    public Builder call(Call c) {
      calls.add(c);
      return this;
    }

    /** The runtime user: a string or any JSON value. */
    public Builder user(Object u) {
      user = u == null ? null : Json.tree(u);
      return this;
    }

    /** The runtime context: any JSON value, forwarded to every exec and never shown to the model. */
    public Builder context(Object c) {
      context = c == null ? null : Json.tree(c);
      return this;
    }

    public Builder request(Request r) {
      request = r;
      return this;
    }

    /** "calls" for a call.result event per call; null (batch) otherwise. */
    public Builder events(String e) {
      events = e;
      return this;
    }

    public Batch build() {
      return new Batch(List.copyOf(calls), user, context, request, events, null);
    }
  }

  Batch withSessionRev(Long rev) {
    return new Batch(calls, user, context, request, events, rev);
  }
}
