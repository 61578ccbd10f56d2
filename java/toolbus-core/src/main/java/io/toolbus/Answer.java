package io.toolbus;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/**
 * The data of io.toolbus.answer (docs/protocol.md 6.3): state and output for an external call,
 * confirmed (with input_digest, rules, reason) for a confirmation.
 */
public record Answer(
    String state,
    List<Block> output,
    Boolean confirmed,
    JsonNode input,
    List<Rule> rules,
    @JsonProperty("input_digest") String inputDigest,
    String reason) {

  /** A successful external answer. */
  public static Answer success(List<Block> output) {
    return new Answer(Codes.STATE_SUCCESS, output, null, null, null, null, null);
  }

  /** A failed external answer (a tool_error result). */
  public static Answer error(List<Block> output) {
    return new Answer(Codes.STATE_ERROR, output, null, null, null, null, null);
  }

  /** A confirmation of the parked input whose digest is given (see {@link #digest}). */
  public static Answer confirm(String inputDigest, List<Rule> rules) {
    return new Answer(null, null, true, null, rules, inputDigest, null);
  }

  /** A denial, with an optional reason the model reads. */
  public static Answer deny(String inputDigest, String reason) {
    return new Answer(null, null, false, null, null, inputDigest, reason);
  }

  Answer withOutput(List<Block> out) {
    return new Answer(state, out, confirmed, input, rules, inputDigest, reason);
  }

  /**
   * The input_digest of a parked input: "sha256:" and the hex SHA-256 of its compact JSON as
   * Jackson writes it. The router hashes Go's spelling, which escapes {@code <}, {@code >} and
   * {@code &}: for such inputs prefer {@link ToolbusClient#confirm(String, String, String, String,
   * boolean, String)}, which uses the digest the router lists.
   */
  public static String digest(JsonNode input) {
    try {
      byte[] sum = java.security.MessageDigest.getInstance("SHA-256").digest(Json.bytes(input));
      return "sha256:" + java.util.HexFormat.of().formatHex(sum);
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
