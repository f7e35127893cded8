package opreg_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	opreg "github.com/opreg/opreg/client/go"
)

// opreg.Version is the repository's VERSION (one version for every package).
func TestVersionIsTheRepositorysVersion(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(text)); opreg.Version != want {
		t.Errorf("opreg.Version is %q, VERSION says %q", opreg.Version, want)
	}
}
