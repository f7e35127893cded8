// The conformance kinds of the errors the helpers raise (PROTOCOL.md, "Errors
// and their conformance kinds"), shared by the run-once scenarios (conformance.test.ts)
// and the decision vectors (decisions.test.ts).
import {
  BusinessError,
  DeadlineExceededError,
  LeaseLostError,
  OperationDeadError,
  OperationHeldError,
  OutcomeNotRecordedError,
  OutcomeUnknownError,
  ReconcileRequiredError,
} from "../src";

/** What a scenario's `fail_unexpected` work throws: an error of no opreg kind (`work_error`). */
export class UnexpectedWorkError extends Error {
  override name = "UnexpectedWorkError";
}

export function kindOf(error: unknown): string {
  if (error instanceof BusinessError) return "business_failure";
  if (error instanceof OperationDeadError) return "dead";
  if (error instanceof OperationHeldError) return "held";
  if (error instanceof LeaseLostError) return "lease_lost";
  if (error instanceof OutcomeUnknownError) return "outcome_unknown";
  if (error instanceof ReconcileRequiredError) return "reconcile_required";
  if (error instanceof DeadlineExceededError) return "deadline_exceeded";
  if (error instanceof OutcomeNotRecordedError) return "outcome_not_recorded";
  if (error instanceof UnexpectedWorkError) return "work_error";
  return `unexpected ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`;
}
