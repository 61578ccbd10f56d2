package io.toolbus;

import io.nats.client.AuthenticationException;
import io.nats.client.Connection;
import io.nats.client.Nats;
import io.nats.client.Options;
import java.io.IOException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * NATS urls with their secrets left out, as Go's natsconn.Redact: a password, or a lone token, as
 * {@code xxxxx}, the user kept. jnats names the urls it could not reach in its exception, secrets
 * and all (session 40, red team), and a program prints or logs that exception.
 */
public final class Urls {
  private static final Pattern USERINFO = Pattern.compile("([A-Za-z][A-Za-z0-9+.-]*://)([^/@\\s,\\[\\]]*)@");

  private Urls() {}

  /** text (a url, several comma-separated, or a message naming them) with every url's password or token as xxxxx. */
  public static String redact(String text) {
    if (text == null) {
      return null;
    }
    Matcher m = USERINFO.matcher(text);
    StringBuilder out = new StringBuilder();
    while (m.find()) {
      String info = m.group(2);
      int colon = info.indexOf(':');
      m.appendReplacement(out, Matcher.quoteReplacement(m.group(1) + (colon >= 0 ? info.substring(0, colon + 1) : "") + "xxxxx@"));
    }
    return m.appendTail(out).toString();
  }

  /** Connects to url with o; a failure's message names the url redacted. */
  static Connection connect(Options.Builder o, String url) throws IOException, InterruptedException {
    try {
      return Nats.connect(o.server(url).build());
    } catch (IOException e) {
      String msg = redact(e.getMessage());
      if (msg == null || msg.equals(e.getMessage())) {
        throw e;
      }
      IOException r = e instanceof AuthenticationException ? new AuthenticationException(msg) : new IOException(msg);
      r.setStackTrace(e.getStackTrace());
      throw r;
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(redact(e.getMessage()));
    }
  }
}
