package opreg_test

// One real opreg server (with its embedded PostgreSQL) for the whole `go test`
// run: started by TestMain from $OPREG_SERVER_BIN (default
// <repo>/target/debug/opreg-server), stopped with SIGTERM at the end. When
// the binary is missing the tests that need it are skipped, unless
// OPREG_REQUIRE_SERVER=1 (ci.sh sets it), which fails the run instead.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	opreg "github.com/opreg/opreg/client/go"
)

const (
	serverStartTimeout = 60 * time.Second
	serverStopTimeout  = 30 * time.Second
)

var (
	// repoRoot is the repository (client/go is two levels down).
	repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))
	// server is the run's server; nil when its binary is missing.
	server *testServer
	// noServer says why there is none.
	noServer string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	binary := serverBinary()
	if _, err := os.Stat(binary); err != nil {
		noServer = fmt.Sprintf("no opreg-server at %s (build it with cargo build -p opreg-server, or set OPREG_SERVER_BIN)", binary)
		if os.Getenv("OPREG_REQUIRE_SERVER") == "1" {
			fmt.Fprintln(os.Stderr, noServer)
			return 1
		}
	} else {
		started, err := startServer(nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		server = started
		defer server.stop()
	}
	return m.Run()
}

func serverBinary() string {
	if bin := os.Getenv("OPREG_SERVER_BIN"); bin != "" {
		return bin
	}
	return filepath.Join(repoRoot, "target", "debug", "opreg-server")
}

type testServer struct {
	address string
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{}
}

// startServer starts opreg-server over its own embedded PostgreSQL in a
// temporary directory; extraEnv(dir) adds settings made in that directory.
func startServer(extraEnv func(dir string) ([]string, error)) (*testServer, error) {
	dir, err := os.MkdirTemp("", "opreg-go-test-")
	if err != nil {
		return nil, err
	}
	// As root, the embedded PostgreSQL runs as another user that must traverse it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var extra []string
	if extraEnv != nil {
		if extra, err = extraEnv(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	for try := 0; try < 3; try++ {
		s, retry, err := startServerOnce(dir, try, extra)
		if err == nil {
			return s, nil
		}
		if !retry {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("opreg-server: no free port after 3 tries")
}

func startServerOnce(dir string, try int, extra []string) (*testServer, bool, error) {
	port, err := freePort()
	if err != nil {
		return nil, false, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("server-%d.log", try))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, false, err
	}
	defer logFile.Close()
	cmd := exec.Command(serverBinary())
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPREG_DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"OPREG_DATA_DIR="+filepath.Join(dir, fmt.Sprintf("pg-%d", try)),
		fmt.Sprintf("OPREG_LISTEN_ADDR=127.0.0.1:%d", port),
		"OPREG_METRICS_ADDR=127.0.0.1:0",
		"OPREG_SHUTDOWN_GRACE=5s",
		"NO_COLOR=1",
	)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	s := &testServer{address: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir, logPath: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(serverStartTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			text := s.log()
			if strings.Contains(strings.ToLower(text), "in use") {
				return nil, true, fmt.Errorf("port in use")
			}
			return nil, false, fmt.Errorf("opreg-server exited:\n%s", text)
		case <-time.After(50 * time.Millisecond):
		}
		if strings.Contains(s.log(), "opreg serving") {
			return s, false, nil
		}
	}
	s.kill()
	return nil, false, fmt.Errorf("opreg-server did not serve within %v:\n%s", serverStartTimeout, s.log())
}

func (s *testServer) log() string {
	text, _ := os.ReadFile(s.logPath)
	return string(text)
}

// stop sends SIGTERM, waits for the server to exit (killing it after the stop
// timeout) and removes its directory.
func (s *testServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(serverStopTimeout):
		s.kill()
	}
	os.RemoveAll(s.dir)
}

func (s *testServer) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// needServer skips the test when the run has no server.
func needServer(t *testing.T) *testServer {
	t.Helper()
	if server == nil {
		t.Skip(noServer)
	}
	return server
}

// dial is a client of the run's server, closed at the end of the test.
func dial(t *testing.T, address string, options ...opreg.Option) *opreg.Client {
	t.Helper()
	client, err := opreg.Dial(context.Background(), address, options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
