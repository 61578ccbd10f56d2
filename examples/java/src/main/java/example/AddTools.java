package example;

import io.agentscope.core.message.ToolResultBlock;
import io.agentscope.core.tool.Tool;
import io.agentscope.core.tool.ToolParam;
import java.math.BigDecimal;

/** An AgentScope @Tool class: java_add adds two numbers and answers with their sum as text. */
public class AddTools {
  @Tool(name = "java_add", description = "Add two numbers and return their sum.", readOnly = true)
  public ToolResultBlock add(
      @ToolParam(name = "a", description = "The first number") double a,
      @ToolParam(name = "b", description = "The second number") double b) {
    String sum = BigDecimal.valueOf(a).add(BigDecimal.valueOf(b)).stripTrailingZeros().toPlainString();
    return ToolResultBlock.text(sum);
  }
}
