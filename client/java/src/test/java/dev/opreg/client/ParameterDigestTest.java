package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The digest rule against every vector of client/testdata/parameter_digests.json. */
class ParameterDigestTest {
  static final ObjectMapper JSON = new ObjectMapper();

  @TestFactory
  Stream<DynamicTest> everyVector() throws IOException {
    JsonNode vectors = JSON.readTree(Files.readString(TestServer.repo().resolve("client/testdata/parameter_digests.json")));
    assertFalse(vectors.isEmpty());
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode vector : vectors) {
      tests.add(DynamicTest.dynamicTest(vector.get("name").asText(), () -> {
        // Read as plain Java values (Jackson: Integer, Long, BigInteger, Double ...): every number
        // becomes an IEEE double, as JSON.parse reads it.
        Object input = JSON.readValue(vector.get("input").asText(), Object.class);
        String canonical = vector.get("canonical").asText();
        byte[] sha256 = HexFormat.of().parseHex(vector.get("sha256").asText());
        assertEquals(canonical, ParameterDigest.canonicalJson(input));
        assertArrayEquals(sha256, ParameterDigest.digest(input));
        // The same value as a protobuf Struct (what Claim sends) digests the same.
        @SuppressWarnings("unchecked")
        Map<String, Object> map = (Map<String, Object>) input;
        assertEquals(canonical, ParameterDigest.canonicalJson(Parameters.toStruct(map)));
      }));
    }
    return tests.stream();
  }

  @Test
  void theInteropParametersDigestAsEveryClientComputesThem() {
    // client/interop/params.py: 100.0 is 100, null members drop, null array items stay.
    Map<String, Object> payee = new LinkedHashMap<>();
    payee.put("b", 2);
    payee.put("a", 1);
    Map<String, Object> params = new LinkedHashMap<>();
    params.put("order", "A-1");
    params.put("amount", 100.0);
    params.put("memo", null);
    params.put("tags", Arrays.asList("x", null));
    params.put("payee", payee);
    assertEquals("{\"amount\":100,\"order\":\"A-1\",\"payee\":{\"a\":1,\"b\":2},\"tags\":[\"x\",null]}",
        ParameterDigest.canonicalJson(params));
  }

  @Test
  void numbersAsEcmaScriptWritesThem() {
    assertEquals("100", ParameterDigest.formatNumber(100.0));
    assertEquals("1e+21", ParameterDigest.formatNumber(1e21));
    assertEquals("100000000000000000000", ParameterDigest.formatNumber(1e20));
    assertEquals("1e-7", ParameterDigest.formatNumber(1e-7));
    assertEquals("0.000001", ParameterDigest.formatNumber(1e-6));
    assertEquals("0", ParameterDigest.formatNumber(-0.0));
    assertEquals("-1.5", ParameterDigest.formatNumber(-1.5));
    assertEquals("5e-324", ParameterDigest.formatNumber(Double.MIN_VALUE));
    assertEquals("1.7976931348623157e+308", ParameterDigest.formatNumber(Double.MAX_VALUE));
    assertEquals("0.002", ParameterDigest.formatNumber(0.002));
    assertEquals("123456789012345680000", ParameterDigest.formatNumber(123456789012345678901.0));
    // Java 17's Double.toString is not always the shortest; the digest must be.
    assertEquals("2e+23", ParameterDigest.formatNumber(2e23));
    assertEquals("1e+23", ParameterDigest.formatNumber(1e23));
  }

  @Test
  void invalidValuesAreRefused() {
    assertThrows(IllegalArgumentException.class, () -> ParameterDigest.digest(Map.of("x", Double.NaN)));
    assertThrows(IllegalArgumentException.class, () -> ParameterDigest.digest(Map.of("x", Double.POSITIVE_INFINITY)));
    assertThrows(IllegalArgumentException.class, () -> ParameterDigest.digest(Map.of("x", "\ud800")));
    assertThrows(IllegalArgumentException.class, () -> ParameterDigest.digest(Map.of("x", new Object())));
    assertThrows(IllegalArgumentException.class,
        () -> ParameterDigest.digest(Map.of("x", new java.math.BigInteger("1" + "0".repeat(400)))));
  }
}
