package example;

import io.agentscope.core.ReActAgent;
import io.agentscope.core.message.ContentBlock;
import io.agentscope.core.message.Msg;
import io.agentscope.core.message.TextBlock;
import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.message.ToolUseBlock;
import io.agentscope.core.message.UserMessage;
import io.agentscope.core.model.ChatModelBase;
import io.agentscope.core.model.ChatResponse;
import io.agentscope.core.model.GenerateOptions;
import io.agentscope.core.model.ToolSchema;
import io.toolbus.ToolbusClient;
import io.toolbus.agentscope.BusToolkit;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import reactor.core.publisher.Flux;

/**
 * An AgentScope ReActAgent whose tools are the bus's: a scripted model (no network) calls
 * java_add with 2 and 3, then answers with what the tool returned. Run it beside {@link
 * AddWorker}: {@code mvn -q -f examples/java/pom.xml exec:java -Dexec.mainClass=example.AddAgent
 * -Dexec.args=nats://127.0.0.1:4222}.
 */
public final class AddAgent {
  private AddAgent() {}

  /** A model that calls java_add once, then says the result. */
  static final class ScriptedModel extends ChatModelBase {
    @Override
    public String getModelName() {
      return "scripted";
    }

    @Override
    protected Flux<ChatResponse> doStream(List<Msg> messages, List<ToolSchema> tools, GenerateOptions options) {
      String result = null;
      for (Msg m : messages) {
        for (ToolResultBlock r : m.getContentBlocks(ToolResultBlock.class)) {
          result = r.getOutput().stream().map(c -> ((TextBlock) c).getText()).reduce("", String::concat);
        }
      }
      List<ContentBlock> turn = result == null
          ? List.of(new ToolUseBlock("call-1", "java_add", Map.of("a", 2, "b", 3), "{\"a\":2,\"b\":3}", null))
          : List.of(TextBlock.builder().text("2 + 3 = " + result).build());
      return Flux.just(ChatResponse.builder().content(turn).build());
    }
  }

  /** Runs one conversation on the bus at url and returns the agent's answer. */
  public static String run(String url) throws Exception {
    try (ToolbusClient client = ToolbusClient.connect(url).source("java-add-agent").build();
        BusToolkit tools = BusToolkit.builder(client, "java-example").build()) {
      ReActAgent agent = ReActAgent.builder().name("adder").sysPrompt("You add numbers with java_add.")
          .model(new ScriptedModel()).toolkit(tools).build();
      Msg answer = agent.call(UserMessage.builder().content(TextBlock.builder().text("What is 2 + 3?").build()).build())
          .block(Duration.ofSeconds(60));
      return answer.getTextContent();
    }
  }

  public static void main(String[] args) throws Exception {
    String url = args.length > 0 ? args[0] : System.getenv().getOrDefault("NATS_URL", "nats://127.0.0.1:4222");
    System.out.println(run(url));
  }
}
