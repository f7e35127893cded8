// Starts opreg-fault-proxy (client/PROTOCOL.md, "The fault proxy") in front of
// a test server: the binary from OPREG_FAULT_PROXY_BIN (default
// <repo>/target/debug/opreg-fault-proxy), `--upstream http://<server>
// --faults <json> --log <temp file>`, stdin piped. It prints `listening
// HOST:PORT` first; close() ends its stdin, waits for it to exit (it answers
// and logs the calls in flight first) and returns the log's lines.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { REPO_ROOT } from "./server";

export function faultProxyBinary(): string {
  return process.env.OPREG_FAULT_PROXY_BIN ?? join(REPO_ROOT, "target", "debug", "opreg-fault-proxy");
}

export interface FaultProxy {
  /** host:port the proxy serves on. */
  address: string;
  logPath: string;
  /** Ends stdin, waits for the exit, returns every log line (comment lines included). */
  close(): Promise<string[]>;
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export async function startProxy(upstream: string, faults: unknown[] = []): Promise<FaultProxy> {
  const binary = faultProxyBinary();
  if (!existsSync(binary)) {
    throw new Error(
      `opreg-fault-proxy not found at ${binary} (cargo build -p opreg-conformance, or set OPREG_FAULT_PROXY_BIN)`,
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "opreg-ts-proxy-"));
  const logPath = join(dir, "calls.log");
  const child = spawn(binary, ["--upstream", `http://${upstream}`, "--faults", JSON.stringify(faults), "--log", logPath], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  running.add(child);
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  let exitStatus: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once("exit", (code, signal) => {
      exitStatus = signal === null ? `exit code ${code}` : `signal ${signal}`;
      running.delete(child);
      resolve();
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

  const lines = createInterface({ input: child.stdout! });
  const first = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 15_000);
    lines.once("line", (line) => {
      clearTimeout(timer);
      resolve(line);
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
  // Keep draining stdout so that the proxy never blocks on a full pipe.
  lines.on("line", () => undefined);
  return { address: match[1], logPath, close };
}
