package opreg_test

// A secured server: TLS with client certificates required (mutual TLS) and
// the access policy of deploy/dev-pki.sh (the client certificate is admin and
// worker everywhere; one API key is a worker). This test starts its own server
// (the run's server is plaintext: the fault proxy speaks only plaintext to
// it), and is skipped without openssl.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

func TestTLSAndAPIKey(t *testing.T) {
	needServer(t)
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl to make the certificates with")
	}
	var apiKey, pki string
	secured, err := startServer(func(dir string) ([]string, error) {
		pki = filepath.Join(dir, "pki")
		out, err := exec.Command("bash", filepath.Join(repoRoot, "deploy", "dev-pki.sh"), pki).CombinedOutput()
		if err != nil {
			return nil, errors.New("deploy/dev-pki.sh: " + err.Error() + "\n" + string(out))
		}
		match := regexp.MustCompile(`API key \([^)]*\): (\S+)`).FindSubmatch(out)
		if match == nil {
			return nil, errors.New("deploy/dev-pki.sh printed no API key:\n" + string(out))
		}
		apiKey = string(match[1])
		return []string{
			"OPREG_TLS_CERT=" + filepath.Join(pki, "server.pem"),
			"OPREG_TLS_KEY=" + filepath.Join(pki, "server.key"),
			"OPREG_TLS_CLIENT_CA=" + filepath.Join(pki, "ca.pem"),
			"OPREG_AUTH_FILE=" + filepath.Join(pki, "policy.toml"),
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer secured.stop()
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(pki, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	ca, cert, key := read("ca.pem"), read("client.pem"), read("client.key")
	ctx, ns := testContext(t), namespace()
	claim := func(client *opreg.Client, key string) error {
		_, err := client.Claim(ctx, claimRequest(t, ns, key, "o", params))
		return err
	}

	t.Run("the client certificate is admin and worker", func(t *testing.T) {
		client := dial(t, "https://"+secured.address, opreg.WithCACert(ca), opreg.WithClientCert(cert, key))
		if err := claim(client, "by-certificate"); err != nil {
			t.Fatal(err)
		}
		if _, err := client.HoldOperation(ctx, &opregv1.HoldOperationRequest{Namespace: ns, OperationKey: "by-certificate", Operator: "go", Reason: "test"}); err != nil {
			t.Error(err)
		}
	})
	t.Run("the API key is the worker", func(t *testing.T) {
		client := dial(t, secured.address, opreg.WithCACert(ca), opreg.WithClientCert(cert, key), opreg.WithServerName("opreg"), opreg.WithAPIKey(apiKey))
		if err := claim(client, "by-key"); err != nil {
			t.Fatal(err)
		}
		_, err := client.HoldOperation(ctx, &opregv1.HoldOperationRequest{Namespace: ns, OperationKey: "by-key", Operator: "go", Reason: "test"})
		var denied *opreg.PermissionDeniedError
		if !errors.As(err, &denied) || denied.Principal() != "developer-key" || denied.Role() != "admin" {
			t.Errorf("an admin call with the worker's key: %T %v", err, err)
		}
	})
	t.Run("a wrong key is unauthenticated", func(t *testing.T) {
		client := dial(t, secured.address, opreg.WithCACert(ca), opreg.WithClientCert(cert, key), opreg.WithAPIKey("guessed"))
		if err := claim(client, "guessed"); !errors.As(err, new(*opreg.UnauthenticatedError)) {
			t.Errorf("got %T %v", err, err)
		}
	})
	t.Run("without a client certificate no connection is made", func(t *testing.T) {
		client := dial(t, secured.address, opreg.WithCACert(ca), opreg.WithAPIKey(apiKey))
		if err := claim(client, "no-certificate"); !opreg.IsTransient(err) {
			t.Errorf("got %T %v", err, err)
		}
	})
	t.Run("a certificate for another name is refused", func(t *testing.T) {
		client := dial(t, secured.address, opreg.WithCACert(ca), opreg.WithClientCert(cert, key), opreg.WithServerName("elsewhere.example"))
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := client.Lookup(callCtx, &opregv1.LookupRequest{Namespace: ns, OperationKey: "by-key"}); !opreg.IsTransient(err) {
			t.Errorf("got %T %v", err, err)
		}
	})
}
