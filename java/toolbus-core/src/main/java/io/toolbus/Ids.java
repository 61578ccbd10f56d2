package io.toolbus;

import java.util.regex.Pattern;

/** Identifier and name rules of docs/protocol.md 1 and 13. */
public final class Ids {
  private static final Pattern ID = Pattern.compile("^[A-Za-z0-9_-]{1,128}$");
  private static final Pattern NAME = Pattern.compile("^[A-Za-z0-9_-]{1,64}$");

  private Ids() {}

  /** Reports whether s is a valid session, reply, call or worker id. */
  public static boolean validId(String s) {
    return s != null && ID.matcher(s).matches();
  }

  /** Reports whether s is a valid tool or group name. */
  public static boolean validName(String s) {
    return s != null && NAME.matcher(s).matches();
  }

  /** Throws bad_event unless s is a valid identifier. */
  public static String requireId(String what, String s) {
    if (!validId(s)) {
      throw new BusException(
          Codes.BAD_EVENT, what + " " + quote(s) + " must match ^[A-Za-z0-9_-]{1,128}$");
    }
    return s;
  }

  /** Throws IllegalArgumentException unless s is a valid tool or group name. */
  public static String requireName(String what, String s) {
    if (!validName(s)) {
      throw new IllegalArgumentException(
          what + " " + quote(s) + " must match ^[A-Za-z0-9_-]{1,64}$");
    }
    return s;
  }

  /** A fresh random identifier (a NUID). */
  public static String next() {
    return io.nats.client.NUID.nextGlobal();
  }

  /** The call key {@code <session>.<replyid>.<callid>}. */
  public static String callKey(String session, String replyId, String callId) {
    return session + "." + replyId + "." + callId;
  }

  static String quote(String s) {
    if (s == null) {
      return "null";
    }
    String t = s.length() > 200 ? s.substring(0, 200) + "…" : s;
    return Json.text(t);
  }
}
