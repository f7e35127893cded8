package dev.opreg.interop;

import dev.opreg.client.OpregClient;
import dev.opreg.client.ParameterDigest;
import dev.opreg.client.Result;
import dev.opreg.client.RunOptions;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Interop, Java side (like {@code client/interop/interop.py}): replays what the languages named on
 * the command line recorded ({@code interop:<language>}, result {@code from-<language>}),
 * identifying the parameters by a digest computed here, then records its own operation
 * ({@code interop:java}, result {@code from-java}) with the run-once helper.
 *
 * <pre>
 * java -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" dev.opreg.interop.Interop ADDRESS NAMESPACE LANGUAGE...
 * </pre>
 */
public final class Interop {
  private Interop() {}

  /** The parameters every language sends (client/interop/params.py): 100.0 is 100, null members drop, null array items stay. */
  public static Map<String, Object> params() {
    Map<String, Object> payee = new LinkedHashMap<>();
    payee.put("b", 2);
    payee.put("a", 1);
    Map<String, Object> params = new LinkedHashMap<>();
    params.put("order", "A-1");
    params.put("amount", 100.0);
    params.put("memo", null);
    params.put("tags", Arrays.asList("x", null));
    params.put("payee", payee);
    return params;
  }

  /** The interop run; throws when a check fails. */
  public static String run(String address, String namespace, List<String> languages) {
    byte[] digest = ParameterDigest.digest(params());
    List<String> replayed = new ArrayList<>();
    try (OpregClient client = OpregClient.connect(address)) {
      for (String language : languages) {
        String key = "interop:" + language;
        String expected = "from-" + language;
        Result replay = client.runOnce(RunOptions.builder(namespace, key).parametersDigest(digest).build(), lease -> {
          throw new IllegalStateException("a recorded operation was executed again");
        });
        if (!replay.replayed() || !replay.text().equals(expected)) {
          throw new IllegalStateException(key + ": expected the replayed result " + expected + ", got " + replay);
        }
        replayed.add(key);
      }
      Result mine = client.runOnce(RunOptions.builder(namespace, "interop:java").parameters(params()).build(),
          lease -> "from-java".getBytes(StandardCharsets.UTF_8));
      if (mine.replayed() || !mine.text().equals("from-java")) {
        throw new IllegalStateException("interop:java: expected to record from-java, got " + mine);
      }
    }
    return "java: replayed " + String.join(", ", replayed) + " by digest, recorded interop:java";
  }

  public static void main(String[] args) {
    if (args.length < 2) {
      System.err.println("usage: Interop ADDRESS NAMESPACE LANGUAGE...");
      System.exit(2);
    }
    try {
      System.out.println(run(args[0], args[1], List.of(args).subList(2, args.length)));
    } catch (RuntimeException e) {
      System.err.println("interop failed: " + e);
      System.exit(1);
    }
    System.exit(0);
  }
}
