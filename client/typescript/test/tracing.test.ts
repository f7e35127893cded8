// W3C trace context: with @opentelemetry/api installed and a propagator
// registered, every call carries the active span's traceparent, as the fault
// proxy logs it (`# Claim traceparent=00-<trace id>-<span id>-<flags>`).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider } from "@opentelemetry/sdk-trace-base";

import { durationFromMillis, OpregClient } from "../src";
import { startProxy } from "./proxy";
import { startServer, type TestServer } from "./server";

let server: TestServer;

before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(new BasicTracerProvider());
  server = await startServer();
});

after(async () => {
  await server?.stop();
  trace.disable();
  propagation.disable();
  context.disable();
});

test("a Claim inside an active span carries its traceparent", { timeout: 60_000 }, async () => {
  const proxy = await startProxy(server.address, []);
  const client = new OpregClient(proxy.address, { defaultTimeoutMs: 10_000 });
  let traceId = "";
  let log: string[];
  try {
    await trace.getTracer("opreg-client-test").startActiveSpan("claim", async (span) => {
      traceId = span.spanContext().traceId;
      try {
        await client.claim({
          namespace: "tracing",
          operationKey: `traced-${randomUUID()}`,
          parameters: { n: 1 },
          owner: "tracer",
          leaseTtl: durationFromMillis(30_000),
        });
      } finally {
        span.end();
      }
    });
    // Outside the span: no trace context.
    await client.lookup({ namespace: "tracing", operationKey: `untraced-${randomUUID()}` }).catch(() => undefined);
  } finally {
    client.close();
    log = await proxy.close();
  }
  const shown = `proxy log:\n${log.join("\n")}`;
  assert.match(traceId, /^[0-9a-f]{32}$/);
  const traced = log.filter((l) => l.startsWith("# Claim traceparent="));
  assert.equal(traced.length, 1, shown);
  assert.match(traced[0], new RegExp(`^# Claim traceparent=00-${traceId}-[0-9a-f]{16}-0[01]`), shown);
  assert.ok(!log.some((l) => l.startsWith("# Lookup traceparent=")), `no traceparent outside a span; ${shown}`);
});
