package io.toolbus;

/**
 * An {@code io.toolbus.error} (docs/protocol.md 1): a code such as {@code bad_request} and a
 * readable message. Thrown by the client for error replies and by decoders for bad input.
 */
public class BusException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String code;

  public BusException(String code, String message) {
    super(message);
    this.code = code;
  }

  public BusException(String code, String message, Throwable cause) {
    super(message, cause);
    this.code = code;
  }

  /** The error code: bad_event, bad_request, not_parked, already_answered, busy, internal, ... */
  public String code() {
    return code;
  }

  @Override
  public String toString() {
    return code + ": " + getMessage();
  }
}
