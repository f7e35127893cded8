// Package interop is the Go side of client/interop: it replays what the Rust
// CLI recorded, identifying the parameters by a digest computed here, then
// records its own operation (cmd/interop runs it; client/interop/run.sh
// describes the whole exchange).
package interop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	opreg "github.com/opreg/opreg/client/go"
)

// Params are the parameters every language sends (client/interop/params.py):
// they exercise the canonical rule (100.0 is 100, null members drop, null
// array items stay).
func Params() map[string]any {
	return map[string]any{
		"order":  "A-1",
		"amount": 100.0,
		"memo":   nil,
		"tags":   []any{"x", nil},
		"payee":  map[string]any{"b": 2, "a": 1},
	}
}

// Run replays interop:<language> (result from-<language>) for each of the
// languages that recorded before it, by digest, which must not execute, then
// records interop:go (result from-go); the line to print.
func Run(ctx context.Context, address, namespace string, languages []string) (string, error) {
	digest, err := opreg.ParametersDigest(Params())
	if err != nil {
		return "", err
	}
	client, err := opreg.Dial(ctx, address)
	if err != nil {
		return "", err
	}
	defer client.Close()
	mustNotRun := func(context.Context, *opreg.Lease) ([]byte, error) {
		return nil, errors.New("a recorded operation was executed again")
	}
	replayed := make([]string, 0, len(languages))
	for _, language := range languages {
		key, want := "interop:"+language, "from-"+language
		replay, err := client.RunOnce(ctx, namespace, key, opreg.Digest(digest), mustNotRun)
		if err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		if !replay.Replayed || string(replay.Value) != want {
			return "", fmt.Errorf("%s: expected the replayed result %s, got %q (replayed %v)", key, want, replay.Value, replay.Replayed)
		}
		replayed = append(replayed, key)
	}
	mine, err := client.RunOnce(ctx, namespace, "interop:go", Params(), func(context.Context, *opreg.Lease) ([]byte, error) {
		return []byte("from-go"), nil
	})
	if err != nil {
		return "", fmt.Errorf("interop:go: %w", err)
	}
	if mine.Replayed || string(mine.Value) != "from-go" {
		return "", fmt.Errorf("interop:go: expected the new result from-go, got %q (replayed %v)", mine.Value, mine.Replayed)
	}
	return fmt.Sprintf("go: replayed %s by digest, recorded interop:go", strings.Join(replayed, ", ")), nil
}
