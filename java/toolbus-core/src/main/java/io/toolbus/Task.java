package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import java.util.List;

/**
 * A background task (docs/protocol.md 5.10): a call that went on past its timeout. state is
 * background while it runs, then its result's state; result is the call's result once it ended.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Task(
    String id,
    String session,
    @JsonProperty("reply_id") String replyId,
    @JsonProperty("call_id") String callId,
    String tool,
    String state,
    String started,
    String deadline,
    String ended,
    Result result) {

  /** Whether the task still runs. */
  public boolean running() {
    return Codes.STATE_BACKGROUND.equals(state);
  }

  /** The data of io.toolbus.task.reply: the tasks, and for the output verb the output so far. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public record Reply(List<Task> tasks, List<Block> output, Boolean truncated) {
    public Reply {
      tasks = tasks == null ? List.of() : tasks;
      output = output == null ? List.of() : output;
    }

    /** Whether the output verb returned only the last 32 KiB of a longer output. */
    public boolean isTruncated() {
      return Boolean.TRUE.equals(truncated);
    }
  }
}
