package io.toolbus.agentscope;

import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.permission.PermissionContextState;
import io.agentscope.core.permission.PermissionDecision;
import io.agentscope.core.tool.Tool;
import io.agentscope.core.tool.ToolBase;
import io.agentscope.core.tool.ToolCallParam;
import io.agentscope.core.tool.ToolEmitter;
import io.agentscope.core.tool.ToolParam;
import java.util.List;
import java.util.Map;
import reactor.core.publisher.Mono;

/** The seed page's examples, made deterministic for the differential tests. */
final class SeedTools {
  private SeedTools() {}

  /** The runtime context a tool gets injected (the page's UserContext). */
  record UserContext(String name, String tenant) {}

  /** SimpleTools: plain @Tool methods, one of them reading the injected UserContext. */
  static final class SimpleTools {
    @Tool(name = "get_current_time", description = "Get the current time in a timezone.", readOnly = true)
    public String getCurrentTime(@ToolParam(name = "timezone", description = "An IANA timezone") String timezone) {
      return "2026-12-03 10:00:00 " + timezone;
    }

    @Tool(name = "whoami", description = "Who is asking.", readOnly = true)
    public String whoami(UserContext user) {
      return user == null ? "nobody" : user.name() + "@" + user.tenant();
    }

    @Tool(name = "count_to", description = "Count to n, reporting each step.", readOnly = true)
    public String countTo(@ToolParam(name = "n", description = "How far") int n, ToolEmitter emitter) {
      for (int i = 1; i <= n; i++) {
        emitter.emit(ToolResultBlock.text("at " + i));
      }
      return "counted to " + n;
    }
  }

  /** WebSearchTool: a ToolBase subclass with its own checkPermissions (always allowed). */
  static final class WebSearchTool extends ToolBase {
    WebSearchTool() {
      super("web_search", "Search the web.", Map.of("type", "object",
          "properties", Map.of("query", Map.of("type", "string", "description", "What to search for")),
          "required", List.of("query")), true, true, false, null, false, false);
    }

    @Override
    public Mono<ToolResultBlock> callAsync(ToolCallParam param) {
      return Mono.just(ToolResultBlock.of(TextBlock.builder().text("3 results for " + param.getInput().get("query")).build()));
    }

    @Override
    public Mono<PermissionDecision> checkPermissions(Map<String, Object> input, PermissionContextState ctx) {
      return Mono.just(PermissionDecision.allow("searching is harmless"));
    }
  }

  /** HumanApprovalTool: an external tool the caller executes. */
  static final class HumanApprovalTool {
    @Tool(name = "human_approval", description = "Ask a human to approve an action.", externalTool = true, readOnly = true)
    public String approve(@ToolParam(name = "action", description = "The action") String action) {
      throw new IllegalStateException("an external tool never runs here");
    }
  }

  /** A deployment tool: not read-only, so the bus asks for a confirmation first. */
  static final class DeployTools {
    @Tool(name = "deploy", description = "Deploy a service.")
    public String deploy(@ToolParam(name = "service", description = "The service") String service) {
      return "deployed " + service;
    }
  }

  /** Database tools, put in the group "database". */
  static final class DatabaseTools {
    @Tool(name = "query_db", description = "Run a read-only SQL query.", readOnly = true)
    public String query(@ToolParam(name = "sql", description = "The query") String sql) {
      return "1 row for " + sql;
    }
  }

  /** A skill's tools, bound to the skill by their group (the page's SkillToolGroup). */
  static final class PdfTools {
    @Tool(name = "pdf_pages", description = "Count a PDF's pages.", readOnly = true)
    public String pages(@ToolParam(name = "file", description = "The PDF") String file) {
      return file + " has 3 pages";
    }
  }

  /** A stateInjected ToolBase: keeps a note in the AgentState's summary (set it, or read it back). */
  static final class NotesTool extends ToolBase {
    NotesTool() {
      super("notes", "Keep a note, or read it back.", Map.of("type", "object",
          "properties", Map.of("note", Map.of("type", "string", "description", "The note to keep"))),
          false, false, false, null, false, true);
    }

    @Override
    public Mono<ToolResultBlock> callAsync(ToolCallParam param) {
      io.agentscope.core.state.AgentState st = io.agentscope.core.agent.RuntimeContext.resolveAgentState(
          param.getRuntimeContext(), param.getAgent());
      Object note = param.getInput().get("note");
      if (note != null) {
        st.setSummary(note.toString());
        return Mono.just(ToolResultBlock.text("kept"));
      }
      return Mono.just(ToolResultBlock.text("the note is " + st.getSummary()));
    }

    @Override
    public Mono<PermissionDecision> checkPermissions(Map<String, Object> input, PermissionContextState ctx) {
      return Mono.just(PermissionDecision.allow("only the session's own note"));
    }
  }
}
