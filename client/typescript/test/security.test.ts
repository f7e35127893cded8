// A secured server: TLS with client certificates required (mutual TLS) and an
// access policy. The client reaches it with a CA, a client certificate and an
// API key; each refusal arrives as its typed error. The certificates are signed
// here, for this run, with the openssl command.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createHash, randomUUID } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import {
  NotFoundError,
  OpregClient,
  PermissionDeniedError,
  UnauthenticatedError,
  UnavailableError,
  type OpregClientOptions,
} from "../src";
import { startServer, type TestServer } from "./server";

const API_KEY = "ts-secret-key";
const IDENTITY = "spiffe://opreg.test/ts-reader";
const T = { timeout: 30_000 };

const pki = mkdtempSync(join(tmpdir(), "opreg-ts-pki-"));
const openssl = (...args: string[]) => execFileSync("openssl", args, { cwd: pki, stdio: "pipe" });
const newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];

function issue(name: string, subjectAltName: string): void {
  writeFileSync(join(pki, `${name}.ext`), `subjectAltName=${subjectAltName}\n`);
  openssl("req", ...newKey, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-days", "1", "-extfile", `${name}.ext`, "-out", `${name}.pem`);
}

let server: TestServer;
const ns = () => `ts-${randomUUID().slice(0, 8)}`;
const file = (name: string) => readFileSync(join(pki, name));

function connect(options: { certificate?: boolean; apiKey?: string } = {}): OpregClient {
  const withCertificate = options.certificate ?? true;
  const settings: OpregClientOptions = {
    tls: {
      caCertificate: file("ca.pem"),
      ...(withCertificate ? { clientCertificate: file("client.pem"), clientKey: file("client.key") } : {}),
      serverName: "localhost",
    },
    defaultTimeoutMs: 5_000,
  };
  if (options.apiKey !== undefined) settings.apiKey = options.apiKey;
  return new OpregClient(`https://${server.address}`, settings);
}

before(async () => {
  openssl("req", "-x509", ...newKey, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=opreg ts CA");
  issue("server", "DNS:localhost,IP:127.0.0.1");
  issue("client", `URI:${IDENTITY}`);
  const sha256 = createHash("sha256").update(API_KEY).digest("hex");
  writeFileSync(
    join(pki, "policy.toml"),
    `[[principal]]\nname = "ts-worker"\napi_key_sha256 = "${sha256}"\nnamespaces = ["ts-*"]\nroles = ["worker"]\n\n` +
      `[[principal]]\nname = "ts-reader"\ntls_identity = "${IDENTITY}"\nnamespaces = ["ts-*"]\nroles = ["reader"]\n`,
  );
  server = await startServer({
    OPREG_TLS_CERT: join(pki, "server.pem"),
    OPREG_TLS_KEY: join(pki, "server.key"),
    OPREG_TLS_CLIENT_CA: join(pki, "ca.pem"),
    OPREG_AUTH_FILE: join(pki, "policy.toml"),
  });
});

after(async () => {
  await server?.stop();
  rmSync(pki, { recursive: true, force: true });
});

describe("security", () => {
  test("an API key over mutual TLS is the worker, in its namespaces only", T, async () => {
    const client = connect({ apiKey: API_KEY });
    try {
      const claimed = await client.claim({ namespace: ns(), operationKey: "k", parameters: { a: 1 }, owner: "w" });
      assert.ok(claimed.lease!.fencingToken > 0n);
      await assert.rejects(
        client.claim({ namespace: "billing", operationKey: "k", parameters: { a: 1 }, owner: "w" }),
        (error: unknown) =>
          error instanceof PermissionDeniedError &&
          error.principal === "ts-worker" &&
          error.namespace === "billing" &&
          error.role === "worker",
      );
    } finally {
      client.close();
    }
  });

  test("the certificate alone is the reader", T, async () => {
    const client = connect();
    try {
      await assert.rejects(client.lookup({ namespace: ns(), operationKey: "none" }), NotFoundError);
      await assert.rejects(
        client.claim({ namespace: ns(), operationKey: "k", parameters: { a: 1 }, owner: "w" }),
        (error: unknown) => error instanceof PermissionDeniedError && error.role === "worker",
      );
    } finally {
      client.close();
    }
  });

  test("a wrong key is unauthenticated", T, async () => {
    const client = connect({ apiKey: "guessed" });
    try {
      await assert.rejects(client.lookup({ namespace: ns(), operationKey: "k" }), UnauthenticatedError);
    } finally {
      client.close();
    }
  });

  test("without a client certificate no connection is made", T, async () => {
    const client = connect({ certificate: false, apiKey: API_KEY });
    try {
      await assert.rejects(client.lookup({ namespace: ns(), operationKey: "k" }), UnavailableError);
    } finally {
      client.close();
    }
  });
});
