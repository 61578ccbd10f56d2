package example;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.toolbus.Router;
import io.toolbus.Worker;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Runs the README's Java example: the worker and the agent against a real router. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ExamplesTest {
  @Test
  void agentCallsJavaAddOnTheBus() throws Exception {
    Router router = Router.shared();
    try (Worker w = AddWorker.start(router.url())) {
      assertEquals("2 + 3 = 5", AddAgent.run(router.url()));
    }
  }
}
