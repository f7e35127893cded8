package dev.opreg.client;

import com.google.protobuf.ListValue;
import com.google.protobuf.NullValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Operation parameters as a {@code google.protobuf.Struct}: from plain Java values (Map, List,
 * String, Number, Boolean, null) and back. Numbers become doubles, as in JSON.
 */
public final class Parameters {
  private Parameters() {}

  /** The Struct of {@code parameters} (String keys; a null member is sent as null and dropped by the digest). */
  public static Struct toStruct(Map<String, ?> parameters) {
    Struct.Builder struct = Struct.newBuilder();
    parameters.forEach((name, value) -> struct.putFields(name, toValue(value)));
    return struct.build();
  }

  /** The protobuf Value of a plain Java value. */
  public static Value toValue(Object value) {
    if (value == null) {
      return Value.newBuilder().setNullValue(NullValue.NULL_VALUE).build();
    }
    if (value instanceof Value protoValue) {
      return protoValue;
    }
    if (value instanceof Struct struct) {
      return Value.newBuilder().setStructValue(struct).build();
    }
    if (value instanceof ListValue list) {
      return Value.newBuilder().setListValue(list).build();
    }
    if (value instanceof Boolean bool) {
      return Value.newBuilder().setBoolValue(bool).build();
    }
    if (value instanceof Number number) {
      return Value.newBuilder().setNumberValue(ParameterDigest.toDouble(number)).build();
    }
    if (value instanceof CharSequence text) {
      return Value.newBuilder().setStringValue(text.toString()).build();
    }
    if (value instanceof Map<?, ?> map) {
      Struct.Builder struct = Struct.newBuilder();
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!(entry.getKey() instanceof String name)) {
          throw new IllegalArgumentException("object member names must be strings, not " + entry.getKey());
        }
        struct.putFields(name, toValue(entry.getValue()));
      }
      return Value.newBuilder().setStructValue(struct).build();
    }
    if (value instanceof Collection<?> || value instanceof Object[]) {
      Collection<?> items = value instanceof Object[] array ? java.util.Arrays.asList(array) : (Collection<?>) value;
      ListValue.Builder list = ListValue.newBuilder();
      for (Object item : items) {
        list.addValues(toValue(item));
      }
      return Value.newBuilder().setListValue(list).build();
    }
    throw new IllegalArgumentException(value.getClass().getName() + " is not a JSON value");
  }

  /** The plain Java map of a Struct (values: null, Boolean, Double, String, List, Map). */
  public static Map<String, Object> fromStruct(Struct struct) {
    Map<String, Object> out = new LinkedHashMap<>();
    struct.getFieldsMap().forEach((name, value) -> out.put(name, plain(value)));
    return out;
  }

  private static Object plain(Value value) {
    return switch (value.getKindCase()) {
      case NULL_VALUE, KIND_NOT_SET -> null;
      case BOOL_VALUE -> value.getBoolValue();
      case NUMBER_VALUE -> value.getNumberValue();
      case STRING_VALUE -> value.getStringValue();
      case LIST_VALUE -> value.getListValue().getValuesList().stream().map(Parameters::plain).toList();
      case STRUCT_VALUE -> fromStruct(value.getStructValue());
    };
  }
}
