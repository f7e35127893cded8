// Starts the real opreg server for a test file: the binary from OPREG_SERVER_BIN
// (default <repo>/target/debug/opreg-server), an embedded PostgreSQL in a private
// temporary directory, a free port on 127.0.0.1 and an OS-chosen port for the
// metrics endpoint (so that neither collides with a server already running on
// the default ports). stop() sends SIGTERM and waits for the server (which
// stops PostgreSQL itself) to exit.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, existsSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

// dist/test/server.js -> client/typescript -> repo root
const PACKAGE_ROOT = resolve(__dirname, "..", "..");
const REPO_ROOT = resolve(PACKAGE_ROOT, "..", "..");

export interface TestServer {
  address: string;
  port: number;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolveAccepts) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolveAccepts(true);
    });
    socket.once("error", () => resolveAccepts(false));
  });
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  // Last resort if a test file dies without running its after() hooks.
  for (const child of running) child.kill("SIGTERM");
});

export async function startServer(env: Record<string, string> = {}): Promise<TestServer> {
  const binary = process.env.OPREG_SERVER_BIN ?? join(REPO_ROOT, "target", "debug", "opreg-server");
  if (!existsSync(binary)) {
    throw new Error(`opreg server binary not found at ${binary} (build it, or set OPREG_SERVER_BIN)`);
  }
  const dir = mkdtempSync(join(tmpdir(), "opreg-ts-"));
  chmodSync(dir, 0o755); // as root, PostgreSQL runs as another user that must traverse it
  const logPath = join(dir, "server.log");
  const log = openSync(logPath, "a");
  const port = await freePort();
  const child = spawn(binary, [], {
    env: {
      ...process.env,
      OPREG_DATA_DIR: join(dir, "pg"),
      OPREG_LISTEN_ADDR: `127.0.0.1:${port}`,
      OPREG_METRICS_ADDR: "127.0.0.1:0",
      ...env,
    },
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  running.add(child);
  let exited = false;
  let exitStatus = "";
  const exit = new Promise<void>((resolveExit) => {
    child.once("exit", (code, signal) => {
      exited = true;
      exitStatus = signal === null ? `exit code ${code}` : `signal ${signal}`;
      running.delete(child);
      resolveExit();
    });
  });

  const stop = async () => {
    if (!exited) {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exit;
      clearTimeout(killer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  const started = Date.now();
  while (!(await accepts(port))) {
    if (exited || Date.now() - started > 60_000) {
      const output = readFileSync(logPath, "utf8");
      await stop();
      const why = exited ? `it exited (${exitStatus})` : "it did not listen within 60 s";
      throw new Error(`opreg server did not start on port ${port}: ${why}:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { address: `127.0.0.1:${port}`, port, stop };
}
