package io.toolbus;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.nats.client.Connection;
import io.nats.client.JetStream;
import io.nats.client.Message;
import io.nats.client.api.PublishAck;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.IntStream;

/**
 * Keeps outputs under the inline limit (docs/protocol.md 5.9): the largest blocks of an output
 * that does not fit are stored in the outputs object store, chunk by chunk and then the metadata
 * (written once, no rollup), and replaced by references.
 */
final class Offloader {
  static final int DEFAULT_INLINE = 1 << 20;
  static final long DEFAULT_MAX = 64L << 20;
  static final int RESERVE = 64 << 10;
  static final int CHUNK = 128 << 10;
  static final int PREVIEW = 2048;
  /**
   * Bytes of chunks one Offloader (one connection) has published ahead of their acknowledgements,
   * all its puts together: what a heartbeat or a reply sent meanwhile may queue behind, and all the
   * chunks it holds in flight (Go's offload.PutWindow; docs/offload.md, paced writes).
   */
  static final int PUT_WINDOW = 1 << 20;
  /** Bounds storing one output (Go's offload.PutTimeout). */
  static final long PUT_TIMEOUT_NANOS = TimeUnit.MINUTES.toNanos(2);
  private static final SecureRandom RANDOM = new SecureRandom();

  private final Connection nc;
  private final String bucket;
  private final int inline;
  private final long max;
  /** A permit for every chunk published and not yet acknowledged, all puts together. */
  final Semaphore room;

  Offloader(Connection nc, String bucket, int inline, long max) {
    this(nc, bucket, inline, max, PUT_WINDOW);
  }

  Offloader(Connection nc, String bucket, int inline, long max, int window) {
    this.nc = nc;
    this.bucket = bucket;
    this.inline = inline <= 0 ? DEFAULT_INLINE : inline;
    this.max = max <= 0 ? DEFAULT_MAX : max;
    this.room = new Semaphore(Math.max(window / CHUNK, 1), true);
  }

  long max() {
    return max;
  }

  /** The inline limit for a result with extra bytes of metadata and state patch. */
  int inline(int extra) {
    long room = nc.getServerInfo().getMaxPayload() - RESERVE - extra;
    return (int) Math.max(0, Math.min(inline, room));
  }

  /** The encoded size of out; text blocks count twice when dup (an error's text is repeated). */
  static long size(List<Block> out, boolean dup) {
    long n = 2;
    for (int i = 0; i < out.size(); i++) {
      n += blockSize(out.get(i), dup) + (i > 0 ? 1 : 0);
    }
    return n;
  }

  /** An upper bound of size(out, dup) from the strings' lengths (JSON escapes at most 6 bytes per char). */
  static long bound(List<Block> out, boolean dup) {
    long n = 2;
    for (Block b : out) {
      long strings = len(b.type()) + len(b.text()) + len(b.mediaType()) + len(b.data()) + len(b.url())
          + len(b.uri()) + len(b.name()) + len(b.title()) + len(b.description());
      n += 256 + 6 * strings + (b.annotations() == null ? 0 : 256 + 64L * (b.annotations().audience() == null ? 0 : b.annotations().audience().size()) + 6 * len(b.annotations().lastModified()));
      if (dup) {
        n += 96 + 6 * (len(b.type()) + len(b.text()));
      }
    }
    return n;
  }

  private static long len(String s) {
    return s == null ? 0 : s.length();
  }

  static long blockSize(Block b, boolean dup) {
    long n = Json.bytes(b).length;
    return dup && "text".equals(b.type()) ? 2 * n : n;
  }

  /** The output fitted under the inline limit; throws TooLarge past the ceiling. */
  List<Block> fit(String key, List<Block> out, int extra, boolean dup) throws IOException {
    long limit = inline(extra);
    if (bound(out, dup) <= Math.min(limit, max)) {
      return out; // the usual small output: no encoding to measure it
    }
    long[] sizes = out.stream().mapToLong(b -> blockSize(b, dup)).toArray(); // each block encoded once
    long size = 2 + java.util.Arrays.stream(sizes).sum() + Math.max(out.size() - 1, 0);
    if (size > max) {
      throw new TooLarge(size, max);
    }
    if (size <= limit) {
      return out;
    }
    String session = key.substring(0, Math.max(0, key.indexOf('.')));
    String base = key + "." + token();
    List<Integer> order = new ArrayList<>(IntStream.range(0, out.size()).boxed().toList());
    order.sort(Comparator.comparingLong((Integer i) -> sizes[i]).reversed());
    List<List<Block>> repl = new ArrayList<>();
    out.forEach(b -> repl.add(null));
    for (int i : order) {
      if (size <= limit) {
        break;
      }
      Block b = out.get(i);
      if (!"text".equals(b.type()) && !("data".equals(b.type()) && b.data() != null && !b.data().isEmpty())) {
        continue;
      }
      List<Block> blocks = spill(session, key, base + "." + i, b, (int) Math.min(limit / 4, PREVIEW));
      repl.set(i, blocks);
      size += size(blocks, dup) - 2 - sizes[i];
    }
    if (size > limit) {
      Block ref = put(session, key, base + ".all", "application/json", Json.bytes(out));
      return List.of(Block.text("[The output, " + out.size() + " blocks, is too large to show here; it is stored as " + ref.url() + ".]"), ref);
    }
    List<Block> res = new ArrayList<>();
    for (int i = 0; i < out.size(); i++) {
      res.addAll(repl.get(i) != null ? repl.get(i) : List.of(out.get(i)));
    }
    return res;
  }

  private List<Block> spill(String session, String key, String name, Block b, int keep) throws IOException {
    if ("text".equals(b.type())) {
      byte[] bytes = b.text().getBytes(StandardCharsets.UTF_8);
      Block ref = put(session, key, name, "text/plain; charset=utf-8", bytes);
      return List.of(Block.text(headTail(b.text(), keep, ref.url())), ref);
    }
    byte[] raw;
    try {
      raw = Base64.getDecoder().decode(b.data());
    } catch (IllegalArgumentException e) {
      throw new IOException("a data block's data is not base64");
    }
    Block ref = put(session, key, name, b.mediaType() == null ? "application/octet-stream" : b.mediaType(), raw);
    return List.of(Block.url(b.mediaType(), ref.url(), ref.size()));
  }

  /**
   * What stays inline of a stored text, byte for byte as the Go offloader's headTail: its beginning
   * and its end (together at most keep bytes, three quarters and one quarter, cut at characters)
   * and a note with its size, digest and reference, naming read_output (protocol 5.9, 11).
   */
  static String headTail(String s, int keep, String url) {
    int at = url.indexOf("#sha256=");
    String digest = at < 0 ? "" : url.substring(at + "#sha256=".length());
    keep = Math.max(keep - url.getBytes(StandardCharsets.UTF_8).length - 320, Math.min(keep, 64));
    int tailN = keep / 4;
    String head = preview(s, keep - tailN);
    if (head.endsWith("…")) {
      head = head.substring(0, head.length() - 1);
    }
    String tail = suffix(s.substring(head.length()), tailN);
    int size = s.getBytes(StandardCharsets.UTF_8).length;
    int headN = head.getBytes(StandardCharsets.UTF_8).length;
    int tailBytes = tail.getBytes(StandardCharsets.UTF_8).length;
    return head + "\n[… " + (size - headN - tailBytes) + " bytes left out …]\n" + tail + "\n[The whole text, " + size
        + " bytes (sha256 " + digest + "), is too large to show here: above are its first " + headN + " and last "
        + tailBytes + " bytes. It is stored as " + url + "; read_output reads any part of it.]";
  }

  /** The end of s, at most n UTF-8 bytes, cut at a character. */
  static String suffix(String s, int n) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length <= n) {
      return s;
    }
    int i = b.length - Math.max(n, 0);
    while (i < b.length && (b[i] & 0xC0) == 0x80) {
      i++;
    }
    return new String(b, i, b.length - i, StandardCharsets.UTF_8);
  }

  static String preview(String s, int n) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length <= n) {
      return s;
    }
    while (n > 0 && (b[n] & 0xC0) == 0x80) {
      n--;
    }
    return new String(b, 0, n, StandardCharsets.UTF_8) + "…";
  }

  /** Stores data as object name and returns its reference block. */
  Block put(String session, String key, String name, String media, byte[] data) throws IOException {
    JetStream js = nc.jetStream();
    String token = token();
    String subj = "$O." + bucket + ".C." + token;
    MessageDigest h = sha256();
    long deadline = System.nanoTime() + PUT_TIMEOUT_NANOS;
    ArrayDeque<Sent> pending = new ArrayDeque<>();
    int chunks = 0;
    try {
      for (int off = 0; off < data.length; off += CHUNK) {
        int n = Math.min(CHUNK, data.length - off);
        byte[] part = java.util.Arrays.copyOfRange(data, off, off + n);
        h.update(part);
        send(js, pending, NatsMessage.builder().subject(subj).data(part).build(), deadline);
        chunks++;
      }
      await(pending, deadline); // every chunk stored before the metadata names them
      String digest = HexFormat.of().formatHex(h.digest());
      ObjectNode info = Json.MAPPER.createObjectNode();
      info.put("name", name).put("description", "toolbus output");
      ObjectNode hs = info.putObject("headers");
      hs.putArray("Content-Type").add(media);
      hs.putArray("Toolbus-Session").add(session);
      hs.putArray("Toolbus-Call").add(key);
      info.putObject("options").put("max_chunk_size", CHUNK);
      info.put("bucket", bucket).put("nuid", token).put("size", data.length)
          .put("mtime", Instant.now().toString()).put("chunks", chunks)
          .put("digest", "SHA-256=" + Base64.getUrlEncoder().encodeToString(HexFormat.of().parseHex(digest)));
      Headers mh = new Headers().put("Nats-Expected-Last-Subject-Sequence", "0");
      String meta = "$O." + bucket + ".M." + Base64.getUrlEncoder().encodeToString(name.getBytes(StandardCharsets.UTF_8));
      send(js, pending, NatsMessage.builder().subject(meta).headers(mh).data(Json.bytes(info)).build(), deadline);
      await(pending, deadline);
      String url = "nats-object://" + bucket + "/" + name + "#sha256=" + digest;
      return Block.url(media, url, (long) data.length);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("storing " + data.length + " bytes in " + bucket + ": interrupted", e);
    } catch (Exception e) {
      Throwable c = e.getCause() != null ? e.getCause() : e;
      throw new IOException("storing " + data.length + " bytes in " + bucket + ": " + c.getMessage(), c);
    } finally {
      pending.forEach(p -> p.free().run()); // a failed put: the room of its unacknowledged chunks back
    }
  }

  /** A publish not yet awaited; free gives its permit of room back, once (its acknowledgement or a failed put's end). */
  private record Sent(CompletableFuture<PublishAck> ack, Runnable free) {}

  /** Publishes m once the window has room; the room comes back at its acknowledgement. */
  private void send(JetStream js, ArrayDeque<Sent> pending, Message m, long deadline) throws Exception {
    if (!room.tryAcquire(Math.max(deadline - System.nanoTime(), 0), TimeUnit.NANOSECONDS)) {
      throw new TimeoutException("no room to publish within " + TimeUnit.NANOSECONDS.toSeconds(PUT_TIMEOUT_NANOS) + " s");
    }
    AtomicBoolean held = new AtomicBoolean(true);
    Runnable free = () -> {
      if (held.getAndSet(false)) {
        room.release();
      }
    };
    CompletableFuture<PublishAck> f;
    try {
      f = js.publishAsync(m);
    } catch (Exception e) {
      free.run();
      throw e;
    }
    f.whenComplete((a, e) -> free.run());
    pending.add(new Sent(f, free));
    while (!pending.isEmpty() && pending.peek().ack().isDone()) { // an early failure ends the put
      pending.poll().ack().get();
    }
  }

  /** Waits for every acknowledgement, in order. */
  private static void await(ArrayDeque<Sent> pending, long deadline) throws Exception {
    while (!pending.isEmpty()) {
      pending.peek().ack().get(Math.max(deadline - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
      pending.poll();
    }
  }

  static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  static String token() {
    byte[] b = new byte[16];
    RANDOM.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  /** An output above the ceiling: neither sent nor stored. */
  static final class TooLarge extends IOException {
    private static final long serialVersionUID = 1L;
    final long size;
    final long max;

    TooLarge(long size, long max) {
      super("the output is " + size + " bytes, more than the limit of " + max + " bytes; it was neither sent nor stored");
      this.size = size;
      this.max = max;
    }
  }
}
