package io.toolbus;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import java.util.List;

/** The data of io.toolbus.call.reply, plus the reply id it answers. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Reply(List<Result> results, List<Parked> parked, Long sessionrev) {
  public Reply {
    results = results == null ? List.of() : results;
    parked = parked == null ? List.of() : parked;
  }

  /** The result of call id, or null. */
  public Result result(String id) {
    return results.stream().filter(r -> r.id().equals(id)).findFirst().orElse(null);
  }
}
