package opreg_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	opreg "github.com/opreg/opreg/client/go"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
	"github.com/opreg/opreg/client/go/internal/interop"
)

// The shared parameters as the Rust CLI sends them in client/interop/run.sh.
const interopParamsJSON = `{"order":"A-1","amount":100,"memo":null,"tags":["x",null],"payee":{"a":1,"b":2}}`

// cmd/interop against the run's server: interop:rust recorded first, by the
// Rust CLI (target/debug/opreg) when it is built, else by Claim and Complete
// with the same parameters as a Struct.
func TestInterop(t *testing.T) {
	srv := needServer(t)
	ctx, ns := testContext(t), "interop-"+randomSuffix()
	if binary := filepath.Join(repoRoot, "target", "debug", "opreg"); fileExists(binary) {
		cli := func(args ...string) []byte {
			cmd := exec.CommandContext(ctx, binary, append([]string{"--endpoint", "http://" + srv.address, "--namespace", ns}, args...)...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("opreg %v: %v\n%s", args, err, out)
			}
			return out
		}
		var claimed struct {
			Lease struct {
				FencingToken json.Number `json:"fencing_token"`
			} `json:"lease"`
		}
		if err := json.Unmarshal(cli("claim", "interop:rust", "--owner", "rust", "--params", interopParamsJSON, "-o", "json"), &claimed); err != nil {
			t.Fatal(err)
		}
		cli("complete", "interop:rust", "--token", claimed.Lease.FencingToken.String(), "success", "--result", "from-rust")
	} else {
		client := dial(t, srv.address)
		var fields map[string]any
		_ = json.Unmarshal([]byte(interopParamsJSON), &fields)
		parameters, _ := structpb.NewStruct(fields)
		claimed, err := client.Claim(ctx, &opregv1.ClaimRequest{Namespace: ns, OperationKey: "interop:rust", Owner: "rust",
			Fingerprint: &opregv1.ClaimRequest_Parameters{Parameters: parameters}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: "interop:rust", FencingToken: claimed.GetLease().GetFencingToken(),
			Outcome: &opregv1.CompleteRequest_Success{Success: &opregv1.Success{Result: []byte("from-rust")}}}); err != nil {
			t.Fatal(err)
		}
	}
	line, err := interop.Run(ctx, srv.address, ns, []string{"rust"})
	if err != nil {
		t.Fatal(err)
	}
	if line != "go: replayed interop:rust by digest, recorded interop:go" {
		t.Errorf("printed %q", line)
	}
	// What the others would find: interop:go replayed with the Struct parameters.
	client := dial(t, srv.address)
	again, err := client.RunOnce(ctx, ns, "interop:go", interop.Params(), func(context.Context, *opreg.Lease) ([]byte, error) { return nil, errors.New("executed again") })
	if err != nil || !again.Replayed || string(again.Value) != "from-go" {
		t.Errorf("interop:go replayed: %+v %v", again, err)
	}
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}
