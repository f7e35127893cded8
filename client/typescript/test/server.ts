// Starts the real opreg server for a test file: the binary from OPREG_SERVER_BIN
// (default <repo>/target/debug/opreg-server), an embedded PostgreSQL in a private
// temporary directory (it listens on a Unix socket only), and both the gRPC and
// the metrics address on port 0 of 127.0.0.1: the OS picks free ports, so
// nothing collides with a server already running on the defaults (50051 / 9464)
// or with a test file running beside this one. The address is read from the
// server's "opreg serving address=..." log line. stop() sends SIGTERM and waits
// for the server (which stops PostgreSQL itself) to exit.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

// dist/test/server.js -> client/typescript -> repo root
export const PACKAGE_ROOT = resolve(__dirname, "..", "..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "..", "..");

export interface TestServer {
  address: string;
  port: number;
  stop(): Promise<void>;
}

// The server's log line once it accepts calls (plain format: ANSI colours stripped).
const SERVING = /opreg serving address=(\S+) metrics=(\S+)/;
// An SGR escape (ESC [ ... m), as the plain log format colours its fields.
const ANSI = new RegExp(String.fromCharCode(27) + "\\[[0-9;]*m", "g");

/** The gRPC address in the "opreg serving" line of `log`, once it is there. */
function servingAddress(log: string): string | undefined {
  return SERVING.exec(log.replace(ANSI, ""))?.[1];
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
  const child = spawn(binary, [], {
    env: {
      ...process.env,
      OPREG_DATA_DIR: join(dir, "pg"),
      OPREG_LISTEN_ADDR: "127.0.0.1:0",
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
  for (;;) {
    const address = servingAddress(readFileSync(logPath, "utf8"));
    if (address !== undefined) {
      const port = Number(address.slice(address.lastIndexOf(":") + 1));
      return { address, port, stop };
    }
    if (exited || Date.now() - started > 60_000) {
      const output = readFileSync(logPath, "utf8");
      await stop();
      const why = exited ? `it exited (${exitStatus})` : "it did not serve within 60 s";
      throw new Error(`opreg server did not start: ${why}:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
