//! Protobuf requests into validated commands. Every refusal names the field.

use std::time::Duration;

use opreg_proto::v1 as pb;

use crate::domain::commands::{
    ClaimCommand, CompleteCommand, FencedWriteCommand, LookupQuery, RenewCommand, ResourceQuery,
};
use crate::domain::complete::Report;
use crate::domain::error::{FieldViolation, RegistryError, Result};
use crate::domain::parameters::{CALLER_DIGEST_LEN, Fingerprint};
use crate::domain::policy::{LeaseBounds, RetryPolicy};
use crate::domain::text::{
    KEY_MAX_BYTES, LABEL_MAX_BYTES, MESSAGE_MAX_BYTES, NAMESPACE_MAX_BYTES, check_identifier,
    check_required_text, check_text,
};

/// The configured bounds requests are checked against.
#[derive(Clone, Copy, Debug)]
pub struct RequestLimits {
    pub lease: LeaseBounds,
    /// Bytes of `result` plus `result_ref` (and of a fenced write's value).
    pub max_result_bytes: usize,
    pub default_retry_policy: RetryPolicy,
}

/// Collects every violation of a request, so one answer names them all.
#[derive(Default)]
struct Checks(Vec<FieldViolation>);

impl Checks {
    fn check(&mut self, outcome: std::result::Result<(), FieldViolation>) {
        if let Err(violation) = outcome {
            self.0.push(violation);
        }
    }

    fn value<T>(&mut self, outcome: std::result::Result<T, FieldViolation>) -> Option<T> {
        outcome.map_err(|violation| self.0.push(violation)).ok()
    }

    fn identity(&mut self, namespace: &str, operation_key: &str) {
        self.check(check_identifier(
            "namespace",
            namespace,
            NAMESPACE_MAX_BYTES,
        ));
        self.check(check_identifier(
            "operation_key",
            operation_key,
            KEY_MAX_BYTES,
        ));
    }

    fn token(&mut self, token: u64) -> Option<i64> {
        self.value(fencing_token(token))
    }

    /// The command, if nothing was refused.
    fn finish<T>(self, command: Option<T>) -> Result<T> {
        match command {
            Some(command) if self.0.is_empty() => Ok(command),
            _ => Err(RegistryError::InvalidArgument(self.0)),
        }
    }
}

pub fn claim(request: pb::ClaimRequest, limits: &RequestLimits) -> Result<ClaimCommand> {
    let mut checks = Checks::default();
    checks.identity(&request.namespace, &request.operation_key);
    checks.check(check_required_text(
        "owner",
        &request.owner,
        LABEL_MAX_BYTES,
    ));
    checks.check(check_text(
        "execution_id",
        &request.execution_id,
        LABEL_MAX_BYTES,
    ));
    let compensates = (!request.compensates.is_empty()).then_some(request.compensates);
    if let Some(original) = &compensates {
        checks.check(check_identifier("compensates", original, KEY_MAX_BYTES));
        if *original == request.operation_key {
            checks.check(Err(FieldViolation::new(
                "compensates",
                "must name another operation",
            )));
        }
    }
    let fingerprint = checks.value(fingerprint(request.fingerprint));
    let lease_ttl = checks
        .value(optional_duration("lease_ttl", request.lease_ttl))
        .and_then(|ttl| checks.value(limits.lease.resolve("lease_ttl", ttl)));
    let retry_policy = match request.retry_policy {
        None => Some(limits.default_retry_policy),
        Some(policy) => checks.value(retry_policy(policy)),
    };
    let command = (|| {
        Some(ClaimCommand {
            namespace: request.namespace,
            operation_key: request.operation_key,
            fingerprint: fingerprint?,
            owner: request.owner,
            execution_id: request.execution_id,
            lease_ttl: lease_ttl?,
            retry_policy: retry_policy?,
            compensates,
        })
    })();
    checks.finish(command)
}

pub fn complete(request: pb::CompleteRequest, limits: &RequestLimits) -> Result<CompleteCommand> {
    let mut checks = Checks::default();
    checks.identity(&request.namespace, &request.operation_key);
    let token = checks.token(request.fencing_token);
    let report = checks.value(report(request.outcome, limits));
    let command = (|| {
        Some(CompleteCommand {
            namespace: request.namespace,
            operation_key: request.operation_key,
            fencing_token: token?,
            report: report?,
        })
    })();
    checks.finish(command)
}

pub fn renew(request: pb::RenewRequest, limits: &RequestLimits) -> Result<RenewCommand> {
    let mut checks = Checks::default();
    checks.identity(&request.namespace, &request.operation_key);
    checks.check(check_required_text(
        "owner",
        &request.owner,
        LABEL_MAX_BYTES,
    ));
    let token = checks.token(request.fencing_token);
    let lease_ttl = checks
        .value(optional_duration("lease_ttl", request.lease_ttl))
        .and_then(|ttl| checks.value(limits.lease.resolve("lease_ttl", ttl)));
    let command = (|| {
        Some(RenewCommand {
            namespace: request.namespace,
            operation_key: request.operation_key,
            owner: request.owner,
            fencing_token: token?,
            lease_ttl: lease_ttl?,
        })
    })();
    checks.finish(command)
}

pub fn fenced_write(
    request: pb::FencedWriteRequest,
    limits: &RequestLimits,
) -> Result<FencedWriteCommand> {
    let mut checks = Checks::default();
    checks.identity(&request.namespace, &request.operation_key);
    checks.check(check_identifier(
        "resource",
        &request.resource,
        KEY_MAX_BYTES,
    ));
    let token = checks.token(request.fencing_token);
    if request.value.len() > limits.max_result_bytes {
        checks.check(Err(too_large("value", limits.max_result_bytes)));
    }
    let command = token.map(|token| FencedWriteCommand {
        namespace: request.namespace,
        resource: request.resource,
        operation_key: request.operation_key,
        fencing_token: token,
        value: request.value,
    });
    checks.finish(command)
}

pub fn lookup(request: pb::LookupRequest) -> Result<LookupQuery> {
    let mut checks = Checks::default();
    checks.identity(&request.namespace, &request.operation_key);
    checks.finish(Some(LookupQuery {
        namespace: request.namespace,
        operation_key: request.operation_key,
        include_executions: request.include_executions,
    }))
}

pub fn get_resource(request: pb::GetResourceRequest) -> Result<ResourceQuery> {
    let mut checks = Checks::default();
    checks.check(check_identifier(
        "namespace",
        &request.namespace,
        NAMESPACE_MAX_BYTES,
    ));
    checks.check(check_identifier(
        "resource",
        &request.resource,
        KEY_MAX_BYTES,
    ));
    checks.finish(Some(ResourceQuery {
        namespace: request.namespace,
        resource: request.resource,
    }))
}

fn fingerprint(
    fingerprint: Option<pb::claim_request::Fingerprint>,
) -> std::result::Result<Fingerprint, FieldViolation> {
    use pb::claim_request::Fingerprint as Given;
    match fingerprint {
        None => Err(FieldViolation::new(
            "parameters",
            "either parameters or parameters_digest is required",
        )),
        Some(Given::Parameters(parameters)) => Fingerprint::from_struct(&parameters)
            .map_err(|error| FieldViolation::new("parameters", error.to_string())),
        Some(Given::ParametersDigest(digest)) if CALLER_DIGEST_LEN.contains(&digest.len()) => {
            Ok(Fingerprint::from_caller_digest(digest))
        }
        Some(Given::ParametersDigest(digest)) => Err(FieldViolation::new(
            "parameters_digest",
            format!(
                "must be {} to {} bytes, got {}",
                CALLER_DIGEST_LEN.start(),
                CALLER_DIGEST_LEN.end(),
                digest.len()
            ),
        )),
    }
}

fn retry_policy(policy: pb::RetryPolicy) -> std::result::Result<RetryPolicy, FieldViolation> {
    let required = |field, duration| {
        optional_duration(field, duration)?.ok_or_else(|| FieldViolation::new(field, "is required"))
    };
    RetryPolicy::new(
        policy.max_attempts,
        required("retry_policy.initial_backoff", policy.initial_backoff)?,
        required("retry_policy.max_backoff", policy.max_backoff)?,
        required("retry_policy.deadline", policy.deadline)?,
    )
}

fn report(
    outcome: Option<pb::complete_request::Outcome>,
    limits: &RequestLimits,
) -> std::result::Result<Report, FieldViolation> {
    use pb::complete_request::Outcome;
    match outcome {
        None => Err(FieldViolation::new(
            "outcome",
            "one of success, failure, retryable or unknown is required",
        )),
        Some(Outcome::Success(success)) => {
            if success.result.len() + success.result_ref.len() > limits.max_result_bytes {
                return Err(too_large("success.result", limits.max_result_bytes));
            }
            check_text(
                "success.result_ref",
                &success.result_ref,
                limits.max_result_bytes,
            )?;
            Ok(Report::Success {
                result: success.result,
                result_ref: success.result_ref,
            })
        }
        Some(Outcome::Failure(failure)) => {
            check_text("failure.code", &failure.code, LABEL_MAX_BYTES)?;
            check_text("failure.message", &failure.message, MESSAGE_MAX_BYTES)?;
            Ok(Report::Failure {
                code: failure.code,
                message: failure.message,
            })
        }
        Some(Outcome::Retryable(error)) => {
            check_text("retryable.error_class", &error.error_class, LABEL_MAX_BYTES)?;
            check_text("retryable.message", &error.message, MESSAGE_MAX_BYTES)?;
            Ok(Report::Retryable {
                retry_after: optional_duration("retryable.retry_after", error.retry_after)?,
                error_class: error.error_class,
                message: error.message,
            })
        }
        Some(Outcome::Unknown(unknown)) => {
            check_text("unknown.remote_ref", &unknown.remote_ref, LABEL_MAX_BYTES)?;
            check_text("unknown.message", &unknown.message, MESSAGE_MAX_BYTES)?;
            Ok(Report::Unknown {
                remote_ref: unknown.remote_ref,
                message: unknown.message,
            })
        }
    }
}

fn fencing_token(token: u64) -> std::result::Result<i64, FieldViolation> {
    match i64::try_from(token) {
        Ok(token) if token > 0 => Ok(token),
        _ => Err(FieldViolation::new(
            "fencing_token",
            "must be a token issued by Claim",
        )),
    }
}

/// Longer durations would overflow timestamps (chrono stops at year 262142).
const MAX_DURATION_SECONDS: u64 = 100 * 365 * 24 * 3_600;

/// A protobuf Duration as a non-negative std Duration, nanoseconds kept.
fn optional_duration(
    field: &'static str,
    duration: Option<prost_types::Duration>,
) -> std::result::Result<Option<Duration>, FieldViolation> {
    let Some(duration) = duration else {
        return Ok(None);
    };
    match (
        u64::try_from(duration.seconds),
        u32::try_from(duration.nanos),
    ) {
        (Ok(seconds), Ok(nanos)) if nanos < 1_000_000_000 && seconds <= MAX_DURATION_SECONDS => {
            Ok(Some(Duration::new(seconds, nanos)))
        }
        _ => Err(FieldViolation::new(
            field,
            "must be a non-negative, normalized duration of at most 100 years",
        )),
    }
}

fn too_large(field: &'static str, limit: usize) -> FieldViolation {
    FieldViolation::new(field, format!("must be at most {limit} bytes"))
}
