// W3C trace context on every call: when @opentelemetry/api is installed (an
// optional peer dependency), the active context is injected into each call's
// metadata with the globally registered propagator (`traceparent` and
// `tracestate` with the W3C one). Without the package, or without a registered
// propagator, nothing is added.
import type { Metadata } from "@grpc/grpc-js";

/** The part of @opentelemetry/api used here (typed locally: the package is optional). */
interface OpenTelemetryApi {
  context: { active(): unknown };
  propagation: { inject(context: unknown, carrier: Record<string, string>): void };
}

let api: OpenTelemetryApi | null | undefined;

function openTelemetry(): OpenTelemetryApi | null {
  if (api === undefined) {
    try {
      // An optional peer dependency, loaded only if present: an import would
      // make it required.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      api = require("@opentelemetry/api") as OpenTelemetryApi;
    } catch {
      api = null;
    }
  }
  return api;
}

/** Adds the active trace context (traceparent, tracestate, ...) to `metadata`. */
export function injectTraceContext(metadata: Metadata): void {
  const otel = openTelemetry();
  if (otel === null) return;
  const carrier: Record<string, string> = {};
  otel.propagation.inject(otel.context.active(), carrier);
  for (const [key, value] of Object.entries(carrier)) metadata.set(key, value);
}
