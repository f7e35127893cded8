// Starts opreg-fault-proxy (client/PROTOCOL.md, "The fault proxy") in front of
// a test server: the binary from OPREG_FAULT_PROXY_BIN (default
// <repo>/target/debug/opreg-fault-proxy), `--upstream http://<server>
// --faults <json> --log <temp file>` (and `--expect <json>` when given the
// calls expected), stdin piped. It prints `listening HOST:PORT` first; close()
// ends its stdin, waits for it to exit (it answers and logs the calls in flight
// first) and returns the log's lines; `exited` tells how it exited, with
// `--expect` its verdict on the calls: exit code 0 or 3, and its last line.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { REPO_ROOT } from "./server";

export function faultProxyBinary(): string {
  return process.env.OPREG_FAULT_PROXY_BIN ?? join(REPO_ROOT, "target", "debug", "opreg-fault-proxy");
}

/** How the proxy exited. */
export interface ProxyExit {
  /** Its exit code; null when a signal ended it. */
  code: number | null;
  /** `exit code N` or `signal S`. */
  status: string;
  /** The last line it printed on stdout after `listening HOST:PORT` (with `expect`, its verdict), if any. */
  lastLine: string | undefined;
  stderr: string;
}

export interface FaultProxy {
  /** host:port the proxy serves on. */
  address: string;
  logPath: string;
  /** The log's lines written so far (comment lines included). */
  lines(): string[];
  /** Ends stdin, waits for the exit, returns every log line (comment lines included). */
  close(): Promise<string[]>;
  /** Settles once the proxy has exited and its stdout and stderr are read. */
  exited: Promise<ProxyExit>;
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Starts the proxy with fault rules `faults`; with `expect` (a scenario's `expect.calls`) it judges the calls it saw. */
export async function startProxy(upstream: string, faults: unknown[] = [], expect?: string[]): Promise<FaultProxy> {
  const binary = faultProxyBinary();
  if (!existsSync(binary)) {
    throw new Error(
      `opreg-fault-proxy not found at ${binary} (cargo build -p opreg-conformance, or set OPREG_FAULT_PROXY_BIN)`,
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "opreg-ts-proxy-"));
  const logPath = join(dir, "calls.log");
  const args = ["--upstream", `http://${upstream}`, "--faults", JSON.stringify(faults), "--log", logPath];
  if (expect !== undefined) args.push("--expect", JSON.stringify(expect));
  const child = spawn(binary, args, { stdio: ["pipe", "pipe", "pipe"] });
  running.add(child);
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  let lastLine: string | undefined;
  let exitStatus: string | undefined;
  // "close", not "exit": it comes once stdout and stderr have ended, so lastLine and stderr are complete.
  const exited = new Promise<ProxyExit>((resolve) => {
    child.once("close", (code, signal) => {
      exitStatus = signal === null ? `exit code ${code}` : `signal ${signal}`;
      running.delete(child);
      resolve({ code, status: exitStatus, lastLine, stderr });
    });
  });
  child.once("error", (error) => {
    stderr += String(error);
  });

  const readLog = () => (existsSync(logPath) ? readFileSync(logPath, "utf8").split("\n").filter((l) => l !== "") : []);
  const close = async (): Promise<string[]> => {
    child.stdin!.end();
    const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(killer);
    const lines = readLog();
    rmSync(dir, { recursive: true, force: true });
    return lines;
  };

  // Every stdout line, read from the start so that none is missed; this also keeps draining
  // stdout, so that the proxy never blocks on a full pipe.
  const lines = createInterface({ input: child.stdout! });
  let firstLine: string | undefined;
  const first = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 15_000);
    lines.on("line", (line) => {
      if (firstLine === undefined) {
        firstLine = line;
        clearTimeout(timer);
        resolve(line);
      } else lastLine = line;
    });
    void exited.then(() => {
      clearTimeout(timer);
      resolve(undefined);
    });
  });
  const match = first === undefined ? null : /^listening (\S+)$/.exec(first.trim());
  if (match === null) {
    if (exitStatus === undefined) child.kill("SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`opreg-fault-proxy did not print "listening HOST:PORT" (${first ?? exitStatus ?? "timeout"}):\n${stderr}`);
  }
  return { address: match[1], logPath, lines: readLog, close, exited };
}
