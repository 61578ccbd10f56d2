package io.toolbus.agentscope;

import com.fasterxml.jackson.databind.JsonNode;
import io.agentscope.core.state.AgentState;
import io.toolbus.Codes;
import io.toolbus.Json;
import io.toolbus.ToolCall;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * An AgentScope {@link AgentState} kept in the bus session's agent state (docs/protocol.md 5.1,
 * 5.2) under the member {@value #MEMBER}, for stateInjected tools served on the bus: read from the
 * exec's {@code state}, written back as a state patch when the tool changed it.
 */
final class SessionState {
  static final String MEMBER = "agentscope";

  private SessionState() {}

  /** The call's AgentState: the session's, or a new one for the session and user. */
  static AgentState read(ToolCall c) {
    JsonNode st = c.state() == null ? null : c.state().get(MEMBER);
    if (st != null && st.isObject()) {
      return AgentState.fromJsonString(Json.text(st));
    }
    AgentState.Builder b = AgentState.builder().sessionId(c.sessionId());
    if (c.user() != null) {
      b.userId(c.userString());
    }
    return b.build();
  }

  /** Sets the state patch that stores state as the session's. */
  static void write(ToolCall c, AgentState state) {
    JsonNode after = Json.parse(state.toJson().getBytes(StandardCharsets.UTF_8), Codes.INTERNAL, "agent state");
    c.patchState(Map.of(MEMBER, after));
  }
}
