package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import java.util.List;

/** A tool group definition (docs/protocol.md 7.3), decoded strictly. */
public record Group(
    String name,
    String description,
    String instructions,
    String scope,
    @JsonProperty("active_by_default") Boolean activeByDefault,
    @JsonProperty("activate_on_skill") String activateOnSkill,
    List<String> skills) {

  /** A meta-scope group the model switches with reset_tools. */
  public static Group meta(String name, String description) {
    return new Group(name, description, null, "meta", false, null, null);
  }

  /** An external-scope group only operators switch. */
  public static Group external(String name, String description) {
    return new Group(name, description, null, "external", false, null, null);
  }

  public Group withInstructions(String i) {
    return new Group(name, description, i, scope, activeByDefault, activateOnSkill, skills);
  }

  public Group withActivateOnSkill(String skill) {
    return new Group(name, description, instructions, scope, activeByDefault, skill, skills);
  }
}
