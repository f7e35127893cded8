package opreg_test

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	opreg "github.com/opreg/opreg/client/go"
)

type digestVector struct {
	Name      string `json:"name"`
	Input     string `json:"input"`
	Canonical string `json:"canonical"`
	SHA256    string `json:"sha256"`
}

func loadDigestVectors(t *testing.T) []digestVector {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "client", "testdata", "parameter_digests.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []digestVector
	if err := json.Unmarshal(text, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) == 0 {
		t.Fatal("no digest vectors")
	}
	return vectors
}

// Every vector of client/testdata/parameter_digests.json, with the input
// decoded three ways: as float64s, as json.Numbers, and as a Struct.
func TestParameterDigestVectors(t *testing.T) {
	for _, vector := range loadDigestVectors(t) {
		t.Run(vector.Name, func(t *testing.T) {
			var plain map[string]any
			if err := json.Unmarshal([]byte(vector.Input), &plain); err != nil {
				t.Fatal(err)
			}
			decoder := json.NewDecoder(strings.NewReader(vector.Input))
			decoder.UseNumber()
			var numbers map[string]any
			if err := decoder.Decode(&numbers); err != nil {
				t.Fatal(err)
			}
			asStruct, err := structpb.NewStruct(plain)
			if err != nil {
				t.Fatal(err)
			}
			for label, input := range map[string]any{"float64": plain, "json.Number": numbers, "Struct": asStruct} {
				canonical, err := opreg.CanonicalJSON(input)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if canonical != vector.Canonical {
					t.Errorf("%s: canonical\n got %s\nwant %s", label, canonical, vector.Canonical)
				}
				digest, err := opreg.ParametersDigest(input)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if got := hex.EncodeToString(digest); got != vector.SHA256 {
					t.Errorf("%s: digest %s, want %s", label, got, vector.SHA256)
				}
			}
		})
	}
}

func TestDigestOfGoValues(t *testing.T) {
	type payee struct {
		B int `json:"b"`
		A int `json:"a"`
	}
	// The interop parameters (client/interop/params.py), written the Go ways.
	fromMap, err := opreg.CanonicalJSON(map[string]any{
		"order": "A-1", "amount": 100.0, "memo": nil, "tags": []any{"x", nil}, "payee": map[string]int{"b": 2, "a": 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"amount":100,"order":"A-1","payee":{"a":1,"b":2},"tags":["x",null]}`
	if fromMap != want {
		t.Errorf("got %s, want %s", fromMap, want)
	}
	fromStruct, err := opreg.CanonicalJSON(struct {
		Order  string  `json:"order"`
		Amount int     `json:"amount"`
		Memo   *string `json:"memo"`
		Tags   []any   `json:"tags"`
		Payee  payee   `json:"payee"`
	}{Order: "A-1", Amount: 100, Tags: []any{"x", nil}, Payee: payee{B: 2, A: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if fromStruct != want {
		t.Errorf("struct: got %s, want %s", fromStruct, want)
	}
}

func TestDigestRefusals(t *testing.T) {
	for name, input := range map[string]any{
		"NaN":           map[string]any{"x": math.NaN()},
		"infinity":      map[string]any{"x": math.Inf(1)},
		"invalid UTF-8": map[string]any{"x": "\xed\xa0\x80"},
		"not an object": []any{1, 2},
		"a channel":     map[string]any{"x": make(chan int)},
	} {
		if _, err := opreg.ParametersDigest(input); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for x, want := range map[float64]string{
		0: "0", math.Copysign(0, -1): "0", 1: "1", -1.5: "-1.5", 100: "100", 1e21: "1e+21", 1e20: "100000000000000000000",
		1e-7: "1e-7", 0.000001: "0.000001", 123e-20: "1.23e-18", 5e-324: "5e-324", math.MaxFloat64: "1.7976931348623157e+308",
		0.1: "0.1", 1.5e300: "1.5e+300", 123456789012345680000: "123456789012345680000",
	} {
		got, err := opreg.FormatNumber(x)
		if err != nil || got != want {
			t.Errorf("FormatNumber(%v) = %q, %v; want %q", x, got, err, want)
		}
	}
}
