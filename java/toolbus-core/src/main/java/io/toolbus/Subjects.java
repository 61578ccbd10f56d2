package io.toolbus;

/**
 * The subjects and names of one deployment (docs/protocol.md 2), for prefix P. It stays one type
 * of one-line methods past the 15-method rule, as Go's bus.Subjects does: it is the table of
 * section 2 in code, read like that table.
 */
public record Subjects(String prefix) {
  public Subjects {
    if (prefix == null || prefix.isEmpty()) {
      prefix = "toolbus";
    }
  }

  public String call(String session) { return prefix + ".call." + session; }
  public String tools(String session) { return prefix + ".tools." + session; }
  public String cancel(String session) { return prefix + ".cancel." + session; }
  public String events(String session) { return prefix + ".events." + session; }
  public String exec(String tool) { return prefix + ".exec." + tool; }
  public String answer(String tool) { return prefix + ".answer." + tool; }
  public String approve(String tool) { return prefix + ".approve." + tool; }
  public String register(String tool) { return prefix + ".register." + tool; }
  public String registerGroup(String group) { return prefix + ".register.group." + group; }
  public String sharedRegister() { return prefix + ".register"; } // protocol 1.11's one subject
  public String admin(String verb) { return prefix + ".admin." + verb; }
  public String outputs(String session) { return prefix + ".outputs." + session; }
  public String tasks(String session) { return prefix + ".tasks." + session; }
  public String work(String tool) { return prefix + ".work." + tool; }
  public String result(String tool) { return prefix + ".result." + tool; }
  public String all(String kind) { return prefix + "." + kind + ".>"; }
  public String execQueue(String tool) { return prefix + "-exec-" + tool; }
  public String workConsumer(String tool) { return prefix + "-work-" + tool; }
  public String workStream() { return prefix.toUpperCase(java.util.Locale.ROOT) + "_WORK"; }
  public String outputsBucket() { return prefix + "_outputs"; }

  /** The token after {@code P.<kind>.}, or null when subject is not of that kind. */
  public String token(String subject, String kind) {
    String p = prefix + "." + kind + ".";
    if (subject == null || !subject.startsWith(p)) {
      return null;
    }
    String rest = subject.substring(p.length());
    return rest.isEmpty() || rest.indexOf('.') >= 0 ? null : rest;
  }
}
