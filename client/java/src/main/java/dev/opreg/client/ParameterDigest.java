package dev.opreg.client;

import com.google.protobuf.ListValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;

/**
 * Parameter digests: RFC 8785 canonical JSON hashed with SHA-256, as the server computes it from
 * parameters sent as a {@code Struct} (the rule is shared by every client and checked against {@code
 * client/testdata/parameter_digests.json}):
 *
 * <ul>
 *   <li>object members whose value is {@code null} are dropped, at every depth; {@code null} inside
 *       an array is kept;
 *   <li>members are ordered by the UTF-16 code units of their names;
 *   <li>numbers are IEEE doubles, written as ECMAScript's {@code Number.prototype.toString} writes
 *       them ({@code 100.0} → {@code 100}, {@code 1e21} → {@code 1e+21}, {@code -0} → {@code 0});
 *       NaN and the infinities are invalid;
 *   <li>strings escape only {@code "}, {@code \} and the control characters below U+0020;
 *   <li>the digest is SHA-256 over the UTF-8 bytes of that text.
 * </ul>
 *
 * <p>Values: {@link Map} (String keys), {@link Collection} or an array of objects, {@link String},
 * {@link Boolean}, {@link Number}, {@code null}, and protobuf {@link Struct}, {@link Value}, {@link
 * ListValue}.
 */
public final class ParameterDigest {
  private ParameterDigest() {}

  /** SHA-256 of {@link #canonicalJson} of {@code value} (32 bytes): a {@code ClaimRequest.parameters_digest}. */
  public static byte[] digest(Object value) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(canonicalJson(value).getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is not available", e);
    }
  }

  /** The canonical JSON text of {@code value}. */
  public static String canonicalJson(Object value) {
    StringBuilder out = new StringBuilder();
    write(out, value);
    return out.toString();
  }

  private static void write(StringBuilder out, Object value) {
    if (value instanceof Struct struct) {
      value = struct.getFieldsMap();
    } else if (value instanceof Value protoValue) {
      value = fromValue(protoValue);
    } else if (value instanceof ListValue list) {
      value = list.getValuesList();
    }
    if (value == null) {
      out.append("null");
    } else if (value instanceof Boolean bool) {
      out.append(bool ? "true" : "false");
    } else if (value instanceof Number number) {
      out.append(formatNumber(toDouble(number)));
    } else if (value instanceof CharSequence text) {
      writeString(out, text.toString());
    } else if (value instanceof Map<?, ?> map) {
      List<Map.Entry<String, Object>> members = new ArrayList<>();
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!(entry.getKey() instanceof String name)) {
          throw new IllegalArgumentException("object member names must be strings, not " + entry.getKey());
        }
        Object member = entry.getValue();
        if (member instanceof Value protoValue) {
          member = fromValue(protoValue);
        }
        if (member != null) {
          members.add(Map.entry(name, member));
        }
      }
      // String.compareTo compares UTF-16 code units, as RFC 8785 orders names.
      members.sort(Map.Entry.comparingByKey());
      out.append('{');
      for (int i = 0; i < members.size(); i++) {
        if (i > 0) {
          out.append(',');
        }
        writeString(out, members.get(i).getKey());
        out.append(':');
        write(out, members.get(i).getValue());
      }
      out.append('}');
    } else if (value instanceof Collection<?> || value instanceof Object[]) {
      Collection<?> items = value instanceof Object[] array ? java.util.Arrays.asList(array) : (Collection<?>) value;
      out.append('[');
      int i = 0;
      for (Object item : items) {
        if (i++ > 0) {
          out.append(',');
        }
        write(out, item);
      }
      out.append(']');
    } else {
      throw new IllegalArgumentException(value.getClass().getName() + " is not a JSON value");
    }
  }

  /** The plain Java value of a protobuf {@link Value}: null, Boolean, Double, String, List or Map. */
  static Object fromValue(Value value) {
    return switch (value.getKindCase()) {
      case NULL_VALUE, KIND_NOT_SET -> null;
      case BOOL_VALUE -> value.getBoolValue();
      case NUMBER_VALUE -> value.getNumberValue();
      case STRING_VALUE -> value.getStringValue();
      case LIST_VALUE -> value.getListValue().getValuesList();
      case STRUCT_VALUE -> value.getStructValue().getFieldsMap();
    };
  }

  static double toDouble(Number number) {
    double x;
    if (number instanceof BigDecimal decimal) {
      x = decimal.doubleValue();
    } else if (number instanceof BigInteger integer) {
      x = integer.doubleValue();
    } else {
      x = number.doubleValue();
    }
    if (Double.isNaN(x) || Double.isInfinite(x)) {
      throw new IllegalArgumentException(number + " is not a valid JSON number (NaN, infinite, or beyond an IEEE double)");
    }
    return x;
  }

  private static void writeString(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(i + 1))) {
          throw new IllegalArgumentException("strings must not contain lone surrogates");
        }
        out.append(c).append(text.charAt(++i));
        continue;
      }
      if (Character.isLowSurrogate(c)) {
        throw new IllegalArgumentException("strings must not contain lone surrogates");
      }
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\b' -> out.append("\\b");
        case '\t' -> out.append("\\t");
        case '\n' -> out.append("\\n");
        case '\f' -> out.append("\\f");
        case '\r' -> out.append("\\r");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }

  /** {@code number} as ECMAScript's {@code Number.prototype.toString} writes it. */
  public static String formatNumber(double x) {
    if (Double.isNaN(x) || Double.isInfinite(x)) {
      throw new IllegalArgumentException("NaN and infinite numbers are not valid JSON");
    }
    if (x == 0) {
      return "0"; // also -0
    }
    if (x < 0) {
      return "-" + formatNumber(-x);
    }
    // The shortest decimal that reads back as x (ECMAScript: the fewest digits k, then the one
    // closest to x): digits d1..dk and n with x = 0.d1..dk * 10^n.
    BigDecimal exact = new BigDecimal(x);
    BigDecimal shortest = null;
    for (int precision = 1; precision <= 17 && shortest == null; precision++) {
      BigDecimal down = exact.round(new MathContext(precision, RoundingMode.FLOOR));
      BigDecimal up = exact.round(new MathContext(precision, RoundingMode.CEILING));
      boolean downOk = down.doubleValue() == x;
      boolean upOk = up.doubleValue() == x;
      if (downOk && upOk) {
        int closer = exact.subtract(down).compareTo(up.subtract(exact));
        shortest = closer < 0 ? down : closer > 0 ? up : exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
      } else if (downOk) {
        shortest = down;
      } else if (upOk) {
        shortest = up;
      }
    }
    if (shortest == null) {
      shortest = exact.round(MathContext.DECIMAL64);
    }
    shortest = shortest.stripTrailingZeros();
    String digits = shortest.unscaledValue().toString();
    int k = digits.length();
    int n = k - shortest.scale();

    if (k <= n && n <= 21) {
      return digits + "0".repeat(n - k);
    }
    if (0 < n && n <= 21) {
      return digits.substring(0, n) + "." + digits.substring(n);
    }
    if (-6 < n && n <= 0) {
      return "0." + "0".repeat(-n) + digits;
    }
    int e = n - 1;
    String head = k == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
    return head + "e" + (e >= 0 ? "+" : "-") + Math.abs(e);
  }
}
