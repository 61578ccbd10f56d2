package io.toolbus;

/** Event types, error codes, states and other constants of docs/protocol.md. */
public final class Codes {
  private Codes() {}

  public static final String SPEC_VERSION = "1.0";
  public static final String CONTENT_TYPE_EVENT = "application/cloudevents+json";
  public static final String CONTENT_TYPE_JSON = "application/json";

  public static final String CALL_BATCH = "io.toolbus.call.batch";
  public static final String CALL_REPLY = "io.toolbus.call.reply";
  /** A router's notice that a batch still runs, on its reply subject + ".running" (3.2.1, 1.25). */
  public static final String CALL_RUNNING = "io.toolbus.call.running";
  public static final String TOOLS_QUERY = "io.toolbus.tools.query";
  public static final String TOOLS_LIST = "io.toolbus.tools.list";
  public static final String TASK_QUERY = "io.toolbus.task.query";
  public static final String TASK_REPLY = "io.toolbus.task.reply";
  public static final String TASK_DONE = "io.toolbus.task.done";
  public static final String UNKNOWN_TASK = "unknown_task";
  public static final String STATE_BACKGROUND = "background";
  public static final String CALL_CANCEL = "io.toolbus.call.cancel";
  public static final String CALL_RESULT = "io.toolbus.call.result";
  public static final String CALL_PROGRESS = "io.toolbus.call.progress";
  /** The most bytes of a progress message's body a router takes (5.3, 1.19). */
  public static final int MAX_PROGRESS = 64 << 10;
  /** The most call ids one cancel may name (3.5); a worker drops a cancel naming more, whole. */
  public static final int MAX_CANCEL_CALLS = 1024;
  public static final String CALL_PARKED = "io.toolbus.call.parked";
  public static final String BATCH_DONE = "io.toolbus.batch.done";
  public static final String EXEC = "io.toolbus.exec";
  public static final String EXEC_RESULT = "io.toolbus.exec.result";
  public static final String EXEC_RECORDED = "io.toolbus.exec.recorded";
  public static final String EXTERNAL_REQUEST = "io.toolbus.external.request";
  public static final String CONFIRM_REQUEST = "io.toolbus.confirm.request";
  public static final String ANSWER = "io.toolbus.answer";
  public static final String ANSWER_ACK = "io.toolbus.answer.ack";
  public static final String REGISTER = "io.toolbus.register";
  public static final String REGISTER_ACK = "io.toolbus.register.ack";
  public static final String ADMIN = "io.toolbus.admin";
  public static final String ADMIN_REPLY = "io.toolbus.admin.reply";
  public static final String ERROR = "io.toolbus.error";
  public static final String OUTPUT_GET = "io.toolbus.output.get";
  public static final String OUTPUT_CHUNK = "io.toolbus.output.chunk";

  public static final String BAD_EVENT = "bad_event";
  public static final String BAD_REQUEST = "bad_request";
  public static final String UNKNOWN_TOOL = "unknown_tool";
  public static final String INACTIVE_TOOL = "inactive_tool";
  public static final String INVALID_INPUT = "invalid_input";
  public static final String DENIED = "denied";
  public static final String UNAVAILABLE = "unavailable";
  public static final String TIMEOUT = "timeout";
  public static final String TOOL_ERROR = "tool_error";
  public static final String UNKNOWN_OUTCOME = "unknown_outcome";
  public static final String INTERRUPTED = "interrupted";
  public static final String NOT_PARKED = "not_parked";
  public static final String ALREADY_ANSWERED = "already_answered";
  public static final String INTERNAL = "internal";
  public static final String LIMIT_EXCEEDED = "limit_exceeded";
  public static final String BUSY = "busy";

  public static final String STATE_SUCCESS = "success";
  public static final String STATE_ERROR = "error";
  public static final String STATE_INTERRUPTED = "interrupted";
  public static final String STATE_DENIED = "denied";

  public static final String KIND_EXTERNAL = "external";
  public static final String KIND_CONFIRM = "confirm";
  public static final String KIND_QUEUED = "queued";

  public static final String MERGE_EXTERNAL_PRIORITY = "merge_external_priority";
  public static final String EXTERNAL_ONLY = "external_only";
  public static final String AGENT_ONLY = "agent_only";

  /** The fixed text of a call ended by a cancel (docs/protocol.md 3.5). */
  public static final String INTERRUPTED_TEXT =
      "<system-reminder>The tool call has been interrupted by the user.</system-reminder>";
}
