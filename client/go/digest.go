package opreg

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// Parameter digests: RFC 8785 canonical JSON hashed with SHA-256, the rule the
// server and every client share:
//
//   - object members whose value is null are dropped, at every depth; null
//     inside an array is kept;
//   - members are ordered by the UTF-16 code units of their names;
//   - numbers are IEEE doubles written as ECMAScript's Number.prototype.toString
//     writes them (100.0 is 100, 1e21 is 1e+21, -0 is 0); NaN and the
//     infinities are refused; integers are converted to doubles, exactly as
//     JSON.parse would read them;
//   - strings escape only '"', '\' and the control characters below U+0020;
//   - the digest is SHA-256 over the UTF-8 bytes of that text.

// ParametersDigest is the SHA-256 (32 bytes) of [CanonicalJSON] of parameters,
// which must be a JSON object: what the server computes from the same
// parameters sent as a Struct. Pass it to RunOnce as a [Digest], or send it as
// ClaimRequest.parameters_digest.
//
// parameters may be a map[string]any (values: nil, bool, string, any Go
// number, json.Number, []any, map[string]any), a *structpb.Struct, or any value
// encoding/json turns into an object (a struct, a map[string]int, ...).
func ParametersDigest(parameters any) ([]byte, error) {
	value, err := normalize(parameters)
	if err != nil {
		return nil, err
	}
	if _, ok := value.(map[string]any); !ok {
		return nil, fmt.Errorf("opreg: parameters must be a JSON object, not %T", parameters)
	}
	var out strings.Builder
	if err := writeCanonical(&out, value, "$"); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(out.String()))
	return sum[:], nil
}

// CanonicalJSON is the canonical text of a JSON value (see [ParametersDigest]
// for the accepted values and the rule).
func CanonicalJSON(value any) (string, error) {
	normalized, err := normalize(value)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	if err := writeCanonical(&out, normalized, "$"); err != nil {
		return "", err
	}
	return out.String(), nil
}

// Struct converts parameters (as accepted by [ParametersDigest]) to the
// google.protobuf.Struct a ClaimRequest carries.
func Struct(parameters any) (*structpb.Struct, error) {
	if s, ok := parameters.(*structpb.Struct); ok {
		return s, nil
	}
	value, err := normalize(parameters)
	if err != nil {
		return nil, err
	}
	object, ok := value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("opreg: parameters must be a JSON object, not %T", parameters)
	}
	return structpb.NewStruct(object)
}

// normalize turns value into plain JSON values: nil, bool, float64, string,
// []any and map[string]any.
func normalize(value any) (any, error) {
	switch v := value.(type) {
	case nil:
		return nil, nil
	case bool:
		return v, nil
	case string:
		return v, nil
	case float64:
		return v, nil
	case float32:
		return float64(v), nil
	case int:
		return float64(v), nil
	case int8:
		return float64(v), nil
	case int16:
		return float64(v), nil
	case int32:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case uint:
		return float64(v), nil
	case uint8:
		return float64(v), nil
	case uint16:
		return float64(v), nil
	case uint32:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return nil, fmt.Errorf("opreg: %q is not a JSON number in the range of a double", string(v))
		}
		return f, nil
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			n, err := normalize(item)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for name, member := range v {
			n, err := normalize(member)
			if err != nil {
				return nil, err
			}
			out[name] = n
		}
		return out, nil
	case *structpb.Struct:
		if v == nil {
			return nil, nil
		}
		return normalizeStruct(v), nil
	case *structpb.Value:
		return normalizeValue(v), nil
	case *structpb.ListValue:
		return normalizeList(v), nil
	case json.RawMessage:
		return decodeJSON(v)
	}
	rv := reflect.ValueOf(value)
	if (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map || rv.Kind() == reflect.Slice) && rv.IsNil() {
		return nil, nil
	}
	if rv.Kind() == reflect.Func || rv.Kind() == reflect.Chan || rv.Kind() == reflect.Complex64 || rv.Kind() == reflect.Complex128 {
		return nil, fmt.Errorf("opreg: a %T is not a JSON value", value)
	}
	// Anything else (structs, typed maps and slices): as encoding/json writes it.
	text, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("opreg: %T is not a JSON value: %w", value, err)
	}
	return decodeJSON(text)
}

func decodeJSON(text []byte) (any, error) {
	decoder := json.NewDecoder(strings.NewReader(string(text)))
	decoder.UseNumber()
	var decoded any
	if err := decoder.Decode(&decoded); err != nil {
		return nil, fmt.Errorf("opreg: not JSON: %w", err)
	}
	return normalize(decoded)
}

func normalizeStruct(s *structpb.Struct) map[string]any {
	out := make(map[string]any, len(s.GetFields()))
	for name, v := range s.GetFields() {
		out[name] = normalizeValue(v)
	}
	return out
}

func normalizeList(l *structpb.ListValue) []any {
	out := make([]any, len(l.GetValues()))
	for i, v := range l.GetValues() {
		out[i] = normalizeValue(v)
	}
	return out
}

func normalizeValue(v *structpb.Value) any {
	switch kind := v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		return kind.BoolValue
	case *structpb.Value_NumberValue:
		return kind.NumberValue
	case *structpb.Value_StringValue:
		return kind.StringValue
	case *structpb.Value_ListValue:
		return normalizeList(kind.ListValue)
	case *structpb.Value_StructValue:
		return normalizeStruct(kind.StructValue)
	}
	return nil // null, or no kind
}

func writeCanonical(out *strings.Builder, value any, path string) error {
	switch v := value.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		if v {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case float64:
		text, err := FormatNumber(v)
		if err != nil {
			return fmt.Errorf("opreg: %s: %w", path, err)
		}
		out.WriteString(text)
	case string:
		return writeString(out, v, path)
	case []any:
		out.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeCanonical(out, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		names := make([]string, 0, len(v))
		for name, member := range v {
			if member != nil {
				names = append(names, name)
			}
		}
		slices.SortFunc(names, compareUTF16)
		out.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeString(out, name, path); err != nil {
				return err
			}
			out.WriteByte(':')
			if err := writeCanonical(out, v[name], path+"."+name); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	default:
		return fmt.Errorf("opreg: %s: a %T is not a JSON value", path, value)
	}
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 requires.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func writeString(out *strings.Builder, text, path string) error {
	if !utf8.ValidString(text) {
		return fmt.Errorf("opreg: %s: a string is not valid UTF-8 (a lone surrogate, say)", path)
	}
	out.WriteByte('"')
	for _, r := range text {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\t':
			out.WriteString(`\t`)
		case '\n':
			out.WriteString(`\n`)
		case '\f':
			out.WriteString(`\f`)
		case '\r':
			out.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
			} else {
				out.WriteRune(r)
			}
		}
	}
	out.WriteByte('"')
	return nil
}

// FormatNumber writes x as ECMAScript's Number.prototype.toString does (the
// number form of RFC 8785). NaN and the infinities are an error.
func FormatNumber(x float64) (string, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "", fmt.Errorf("%v is not a valid JSON number", x)
	}
	if x == 0 {
		return "0", nil // -0 too
	}
	if x < 0 {
		text, err := FormatNumber(-x)
		return "-" + text, err
	}
	// The shortest digits that round-trip, as d.ddddde±XX: digits d1..dk and n
	// with x = 0.d1..dk × 10^n.
	shortest := strconv.FormatFloat(x, 'e', -1, 64)
	mantissa, exponent, _ := strings.Cut(shortest, "e")
	e, err := strconv.Atoi(exponent)
	if err != nil {
		return "", err
	}
	digits := strings.Replace(mantissa, ".", "", 1)
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		digits = "0"
	}
	k, n := len(digits), e+1
	switch {
	case k <= n && n <= 21:
		return digits + strings.Repeat("0", n-k), nil
	case 0 < n && n <= 21:
		return digits[:n] + "." + digits[n:], nil
	case -6 < n && n <= 0:
		return "0." + strings.Repeat("0", -n) + digits, nil
	}
	sign := "+"
	if n-1 < 0 {
		sign = "-"
	}
	head := digits[:1]
	if k > 1 {
		head += "." + digits[1:]
	}
	return fmt.Sprintf("%se%s%d", head, sign, abs(n-1)), nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
