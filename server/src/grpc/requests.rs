//! Protobuf requests into validated commands. Every refusal names the field.

use std::time::Duration;

use opreg_proto::v1 as pb;

use crate::domain::admin::{Actor, Resolution};
use crate::domain::claim::ReusePolicy;
use crate::domain::commands::{
    AdminCommand, AdminTarget, ClaimCommand, ClaimDueCommand, CompleteCommand, FencedWriteCommand,
    LeaseRequest, ListQuery, LookupQuery, Narrowing, PageCursor, RenewCommand, ResourceQuery,
};
use crate::domain::complete::Report;
use crate::domain::error::{FieldViolation, RegistryError, Result};
use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::Status;
use crate::domain::parameters::{CALLER_DIGEST_LEN, Fingerprint, Shape};
use crate::domain::policy::{LeaseBounds, RetryPolicy};
use crate::domain::text::{
    KEY_MAX_BYTES, LABEL_MAX_BYTES, MESSAGE_MAX_BYTES, check_identifier, check_required_text,
    check_text,
};

/// The configured bounds requests are checked against.
#[derive(Clone, Copy, Debug)]
pub struct RequestLimits {
    pub lease: LeaseBounds,
    pub parameters: ParameterLimits,
    /// Bytes of `result` plus `result_ref` (and of a fenced write's value).
    pub max_result_bytes: usize,
    pub default_retry_policy: RetryPolicy,
}

/// How large a Claim's parameters may be: checked on the decoded Struct before
/// canonicalising (values, depth), then on the canonical text (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParameterLimits {
    pub max_bytes: usize,
    pub max_values: usize,
    pub max_depth: usize,
}

impl ParameterLimits {
    fn check_shape(
        &self,
        parameters: &prost_types::Struct,
    ) -> std::result::Result<(), FieldViolation> {
        let shape = Shape::of(parameters);
        if shape.values > self.max_values {
            return Err(FieldViolation::new(
                "parameters",
                format!(
                    "must hold at most {} values, got {}",
                    self.max_values, shape.values
                ),
            ));
        }
        if shape.depth > self.max_depth {
            return Err(FieldViolation::new(
                "parameters",
                format!(
                    "must nest at most {} levels, got {}",
                    self.max_depth, shape.depth
                ),
            ));
        }
        Ok(())
    }

    fn check_size(&self, fingerprint: &Fingerprint) -> std::result::Result<(), FieldViolation> {
        let bytes = fingerprint.canonical.as_ref().map_or(0, String::len);
        if bytes > self.max_bytes {
            return Err(FieldViolation::new(
                "parameters",
                format!(
                    "must be at most {} bytes as canonical JSON, got {bytes}",
                    self.max_bytes
                ),
            ));
        }
        Ok(())
    }
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

    fn namespace(&mut self, namespace: String) -> Option<Namespace> {
        self.value(Namespace::parse("namespace", namespace))
    }

    fn identity(
        &mut self,
        namespace: String,
        operation_key: String,
    ) -> (Option<Namespace>, Option<OperationKey>) {
        (
            self.namespace(namespace),
            self.value(OperationKey::parse("operation_key", operation_key)),
        )
    }

    fn token(&mut self, token: u64) -> Option<FencingToken> {
        self.value(FencingToken::parse("fencing_token", token))
    }

    /// The lease length asked for, within the bounds; the default when absent.
    fn lease_ttl(
        &mut self,
        requested: Option<prost_types::Duration>,
        bounds: &LeaseBounds,
    ) -> Option<Duration> {
        self.value(optional_duration("lease_ttl", requested))
            .and_then(|ttl| self.value(bounds.resolve("lease_ttl", ttl)))
    }

    fn lease_request(
        &mut self,
        owner: String,
        execution_id: String,
        ttl: Option<prost_types::Duration>,
        limits: &RequestLimits,
    ) -> Option<LeaseRequest> {
        self.check(check_required_text("owner", &owner, LABEL_MAX_BYTES));
        self.check(check_text("execution_id", &execution_id, LABEL_MAX_BYTES));
        let ttl = self.lease_ttl(ttl, &limits.lease);
        Some(LeaseRequest {
            owner,
            execution_id,
            ttl: ttl?,
        })
    }

    /// The command, if nothing was refused.
    fn finish<T>(self, command: Option<T>) -> Result<T> {
        match command {
            Some(command) if self.0.is_empty() => Ok(command),
            _ => Err(RegistryError::InvalidArgument(self.0)),
        }
    }
}

/// A unary Claim: the command, and how long the caller will wait for an
/// answer it can act on (zero: none).
pub fn waiting_claim(
    request: pb::ClaimRequest,
    limits: &RequestLimits,
) -> Result<(ClaimCommand, Duration)> {
    let mut checks = Checks::default();
    let wait = checks.value(optional_duration("wait", request.wait));
    let command = claim_checked(request, limits, &mut checks);
    checks.finish(command.zip(wait.map(Option::unwrap_or_default)))
}

/// A Claim answered at once: in a batch, or in the caller's transaction.
pub fn claim(request: pb::ClaimRequest, limits: &RequestLimits) -> Result<ClaimCommand> {
    let mut checks = Checks::default();
    checks.check(answered_at_once(request.wait));
    let command = claim_checked(request, limits, &mut checks);
    checks.finish(command)
}

/// Only a Claim or Lookup of its own, over gRPC, waits: a batch item or a
/// call in the caller's transaction (which would hold its locks meanwhile)
/// that asks to is refused rather than answered at once unannounced.
fn answered_at_once(
    wait: Option<prost_types::Duration>,
) -> std::result::Result<(), FieldViolation> {
    match wait {
        Some(wait) if wait != prost_types::Duration::default() => Err(FieldViolation::new(
            "wait",
            "only a Claim or Lookup of its own waits; this one is answered at once",
        )),
        _ => Ok(()),
    }
}

fn claim_checked(
    request: pb::ClaimRequest,
    limits: &RequestLimits,
    checks: &mut Checks,
) -> Option<ClaimCommand> {
    let (namespace, operation_key) = checks.identity(request.namespace, request.operation_key);
    let lease = checks.lease_request(
        request.owner,
        request.execution_id,
        request.lease_ttl,
        limits,
    );
    let compensates = if request.compensates.is_empty() {
        Some(None)
    } else {
        checks
            .value(OperationKey::parse("compensates", request.compensates))
            .map(Some)
    };
    if let (Some(Some(original)), Some(key)) = (&compensates, &operation_key)
        && original == key
    {
        checks.check(Err(FieldViolation::new(
            "compensates",
            "must name another operation",
        )));
    }
    let fingerprint = checks.value(fingerprint(request.fingerprint, &limits.parameters));
    let retry_policy = match request.retry_policy {
        None => Some(limits.default_retry_policy),
        Some(policy) => checks.value(retry_policy(policy)),
    };
    let reuse = checks.value(reuse_policy(request.reuse));
    Some(ClaimCommand {
        namespace: namespace?,
        operation_key: operation_key?,
        fingerprint: fingerprint?,
        lease: lease?,
        retry_policy: retry_policy?,
        compensates: compensates?,
        reuse: reuse?,
        principal: String::new(),
    })
}

fn reuse_policy(value: i32) -> std::result::Result<ReusePolicy, FieldViolation> {
    match pb::ReusePolicy::try_from(value) {
        Ok(pb::ReusePolicy::Unspecified | pb::ReusePolicy::Replay) => Ok(ReusePolicy::Replay),
        Ok(pb::ReusePolicy::AfterFailure) => Ok(ReusePolicy::AfterFailure),
        Ok(pb::ReusePolicy::RejectExisting) => Ok(ReusePolicy::RejectExisting),
        Err(_) => Err(FieldViolation::new(
            "reuse",
            format!("unknown reuse policy {value}"),
        )),
    }
}

/// Most operations one ClaimDue hands out, or one ListOperations page holds.
const PAGE_MAX: u32 = 1_000;
/// What a zero limit or page size asks for.
const PAGE_DEFAULT: u32 = 100;

pub fn claim_due(request: pb::ClaimDueRequest, limits: &RequestLimits) -> Result<ClaimDueCommand> {
    let mut checks = Checks::default();
    let namespace = checks.namespace(request.namespace);
    let lease = checks.lease_request(
        request.owner,
        request.execution_id,
        request.lease_ttl,
        limits,
    );
    let limit = checks.value(page_size("limit", request.limit, PAGE_DEFAULT));
    let command = (|| {
        Some(ClaimDueCommand {
            namespace: namespace?,
            lease: lease?,
            limit: limit?,
        })
    })();
    checks.finish(command)
}

/// Zero asks for the default; otherwise 1 to 1000.
fn page_size(
    field: &'static str,
    value: u32,
    default: u32,
) -> std::result::Result<u32, FieldViolation> {
    match value {
        0 => Ok(default),
        1..=PAGE_MAX => Ok(value),
        _ => Err(FieldViolation::new(
            field,
            format!("must be between 1 and {PAGE_MAX} (0 for {default})"),
        )),
    }
}

pub fn complete(request: pb::CompleteRequest, limits: &RequestLimits) -> Result<CompleteCommand> {
    let mut checks = Checks::default();
    let (namespace, operation_key) = checks.identity(request.namespace, request.operation_key);
    let token = checks.token(request.fencing_token);
    let report = checks.value(report(request.outcome, limits));
    let command = (|| {
        Some(CompleteCommand {
            namespace: namespace?,
            operation_key: operation_key?,
            fencing_token: token?,
            report: report?,
        })
    })();
    checks.finish(command)
}

pub fn renew(request: pb::RenewRequest, limits: &RequestLimits) -> Result<RenewCommand> {
    let mut checks = Checks::default();
    let (namespace, operation_key) = checks.identity(request.namespace, request.operation_key);
    checks.check(check_required_text(
        "owner",
        &request.owner,
        LABEL_MAX_BYTES,
    ));
    let token = checks.token(request.fencing_token);
    let lease_ttl = checks.lease_ttl(request.lease_ttl, &limits.lease);
    let command = (|| {
        Some(RenewCommand {
            namespace: namespace?,
            operation_key: operation_key?,
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
    let (namespace, operation_key) = checks.identity(request.namespace, request.operation_key);
    checks.check(check_identifier(
        "resource",
        &request.resource,
        KEY_MAX_BYTES,
    ));
    let token = checks.token(request.fencing_token);
    if request.value.len() > limits.max_result_bytes {
        checks.check(Err(too_large("value", limits.max_result_bytes)));
    }
    let command = (|| {
        Some(FencedWriteCommand {
            namespace: namespace?,
            resource: request.resource,
            operation_key: operation_key?,
            fencing_token: token?,
            value: request.value,
        })
    })();
    checks.finish(command)
}

/// A unary Lookup: the query, how long to wait for the status to move (zero:
/// none) and the status it must move from (`None`: the one found first).
pub fn waiting_lookup(
    request: pb::LookupRequest,
) -> Result<(LookupQuery, Duration, Option<Status>)> {
    let mut checks = Checks::default();
    let wait = checks.value(optional_duration("wait", request.wait));
    let changed_from = checks.value(known_status("changed_from", request.changed_from));
    let query = lookup_checked(request, &mut checks);
    checks.finish((|| {
        Some((query?, wait?.unwrap_or_default(), changed_from?))
    })())
}

/// Any status by its protobuf number; `None` for UNSPECIFIED.
fn known_status(
    field: &'static str,
    value: i32,
) -> std::result::Result<Option<Status>, FieldViolation> {
    match pb::OperationStatus::try_from(value) {
        Ok(pb::OperationStatus::Unspecified) => Ok(None),
        Ok(pb::OperationStatus::InProgress) => Ok(Some(Status::InProgress)),
        Ok(pb::OperationStatus::Succeeded) => Ok(Some(Status::Succeeded)),
        Ok(pb::OperationStatus::Failed) => Ok(Some(Status::Failed)),
        Ok(pb::OperationStatus::RetryScheduled) => Ok(Some(Status::RetryScheduled)),
        Ok(pb::OperationStatus::Unknown) => Ok(Some(Status::Unknown)),
        Ok(pb::OperationStatus::Dead) => Ok(Some(Status::Dead)),
        Err(_) => Err(FieldViolation::new(
            field,
            format!("unknown status {value}"),
        )),
    }
}

/// A Lookup answered at once: in the caller's transaction.
pub fn lookup(request: pb::LookupRequest) -> Result<LookupQuery> {
    let mut checks = Checks::default();
    checks.check(answered_at_once(request.wait));
    let query = lookup_checked(request, &mut checks);
    checks.finish(query)
}

fn lookup_checked(request: pb::LookupRequest, checks: &mut Checks) -> Option<LookupQuery> {
    let (namespace, operation_key) = checks.identity(request.namespace, request.operation_key);
    Some(LookupQuery {
        namespace: namespace?,
        operation_key: operation_key?,
        include_executions: request.include_executions,
        include_audit: request.include_audit,
    })
}

pub fn get_resource(request: pb::GetResourceRequest) -> Result<ResourceQuery> {
    let mut checks = Checks::default();
    let namespace = checks.namespace(request.namespace);
    checks.check(check_identifier(
        "resource",
        &request.resource,
        KEY_MAX_BYTES,
    ));
    let command = namespace.map(|namespace| ResourceQuery {
        namespace,
        resource: request.resource,
    });
    checks.finish(command)
}

/// The unfinished statuses the operator's queue lists when none are named.
const QUEUE_STATUSES: [Status; 4] = [
    Status::InProgress,
    Status::RetryScheduled,
    Status::Unknown,
    Status::Dead,
];

pub fn list_operations(request: pb::ListOperationsRequest) -> Result<ListQuery> {
    let mut checks = Checks::default();
    let namespace = checks.namespace(request.namespace);
    let mut statuses = Vec::new();
    for value in &request.statuses {
        match queue_status(*value) {
            Ok(status) if !statuses.contains(&status) => statuses.push(status),
            Ok(_) => {}
            Err(violation) => checks.check(Err(violation)),
        }
    }
    if statuses.is_empty() {
        statuses = QUEUE_STATUSES.to_vec();
    }
    let older_than = checks.value(optional_duration("older_than", request.older_than));
    let page_size = checks.value(page_size("page_size", request.page_size, PAGE_DEFAULT));
    let after = if request.page_token.is_empty() {
        Some(None)
    } else {
        checks
            .value(decode_page_token(&request.page_token))
            .map(Some)
    };
    let command = (|| {
        Some(ListQuery {
            namespace: namespace?,
            statuses,
            expired_leases_only: request.expired_leases_only,
            older_than: older_than?,
            held_only: request.held_only,
            narrowing: Narrowing::default(),
            page_size: page_size?,
            after: after?,
        })
    })();
    checks.finish(command)
}

fn queue_status(value: i32) -> std::result::Result<Status, FieldViolation> {
    match known_status("statuses", value)? {
        Some(Status::Succeeded | Status::Failed) => Err(FieldViolation::new(
            "statuses",
            "the queue lists unfinished operations; look finished ones up by key",
        )),
        Some(status) => Ok(status),
        None => Err(FieldViolation::new(
            "statuses",
            format!("unknown status {value}"),
        )),
    }
}

/// Page tokens are opaque to callers: the hex of `<created_at µs>:<key>`.
pub fn encode_page_token(cursor: &PageCursor) -> String {
    hex::encode(format!(
        "{}:{}",
        cursor.created_at.timestamp_micros(),
        cursor.operation_key
    ))
}

fn decode_page_token(token: &str) -> std::result::Result<PageCursor, FieldViolation> {
    let invalid = || FieldViolation::new("page_token", "is not a token this server issued");
    let text = hex::decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(invalid)?;
    let (micros, key) = text.split_once(':').ok_or_else(invalid)?;
    let created_at = micros
        .parse::<i64>()
        .ok()
        .and_then(chrono::DateTime::from_timestamp_micros)
        .ok_or_else(invalid)?;
    let operation_key = OperationKey::parse("page_token", key.to_owned())?;
    Ok(PageCursor {
        created_at,
        operation_key,
    })
}

/// The target and the stated operator and reason every admin action needs.
fn admin_target(
    checks: &mut Checks,
    namespace: String,
    operation_key: String,
    operator: String,
    reason: String,
) -> Option<AdminTarget> {
    let (namespace, operation_key) = checks.identity(namespace, operation_key);
    checks.check(check_required_text("operator", &operator, LABEL_MAX_BYTES));
    checks.check(check_required_text("reason", &reason, MESSAGE_MAX_BYTES));
    Some(AdminTarget {
        namespace: namespace?,
        operation_key: operation_key?,
        actor: Actor {
            operator,
            reason,
            principal: String::new(),
        },
    })
}

pub fn resolve(
    request: pb::ResolveOperationRequest,
    limits: &RequestLimits,
) -> Result<(AdminTarget, AdminCommand)> {
    use pb::resolve_operation_request::Outcome;
    let mut checks = Checks::default();
    let target = admin_target(
        &mut checks,
        request.namespace,
        request.operation_key,
        request.operator,
        request.reason,
    );
    let resolution = match request.outcome {
        None => checks.value(Err(FieldViolation::new(
            "outcome",
            "one of success or failure is required",
        ))),
        Some(Outcome::Success(success)) => checks
            .value(checked_success(success, limits))
            .map(|(result, result_ref)| Resolution::Success { result, result_ref }),
        Some(Outcome::Failure(failure)) => checks
            .value(checked_failure(failure))
            .map(|(code, message)| Resolution::Failure { code, message }),
    };
    let command = (|| Some((target?, AdminCommand::Resolve(resolution?))))();
    checks.finish(command)
}

pub fn requeue(
    request: pb::RequeueOperationRequest,
    limits: &RequestLimits,
) -> Result<(AdminTarget, AdminCommand)> {
    let mut checks = Checks::default();
    let target = admin_target(
        &mut checks,
        request.namespace,
        request.operation_key,
        request.operator,
        request.reason,
    );
    checks.check(check_text("revision", &request.revision, MESSAGE_MAX_BYTES));
    let policy = match request.retry_policy {
        None => Some(limits.default_retry_policy),
        Some(policy) => checks.value(retry_policy(policy)),
    };
    let command = (|| {
        Some((
            target?,
            AdminCommand::Requeue {
                revision: request.revision,
                policy: policy?,
            },
        ))
    })();
    checks.finish(command)
}

pub fn hold(request: pb::HoldOperationRequest) -> Result<(AdminTarget, AdminCommand)> {
    bare_action(
        (request.namespace, request.operation_key),
        (request.operator, request.reason),
        AdminCommand::Hold,
    )
}

pub fn release(request: pb::ReleaseOperationRequest) -> Result<(AdminTarget, AdminCommand)> {
    bare_action(
        (request.namespace, request.operation_key),
        (request.operator, request.reason),
        AdminCommand::Release,
    )
}

/// An action with nothing to it but its target and the operator's words.
fn bare_action(
    (namespace, operation_key): (String, String),
    (operator, reason): (String, String),
    command: AdminCommand,
) -> Result<(AdminTarget, AdminCommand)> {
    let mut checks = Checks::default();
    let target = admin_target(&mut checks, namespace, operation_key, operator, reason);
    let command = target.map(|target| (target, command));
    checks.finish(command)
}

fn fingerprint(
    fingerprint: Option<pb::claim_request::Fingerprint>,
    limits: &ParameterLimits,
) -> std::result::Result<Fingerprint, FieldViolation> {
    use pb::claim_request::Fingerprint as Given;
    match fingerprint {
        None => Err(FieldViolation::new(
            "parameters",
            "either parameters or parameters_digest is required",
        )),
        Some(Given::Parameters(parameters)) => {
            limits.check_shape(&parameters)?;
            let fingerprint = Fingerprint::from_struct(&parameters)
                .map_err(|error| FieldViolation::new("parameters", error.to_string()))?;
            limits.check_size(&fingerprint)?;
            Ok(fingerprint)
        }
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
        Some(Outcome::Success(success)) => checked_success(success, limits)
            .map(|(result, result_ref)| Report::Success { result, result_ref }),
        Some(Outcome::Failure(failure)) => {
            checked_failure(failure).map(|(code, message)| Report::Failure { code, message })
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

/// A success's result and reference, within the result limit.
fn checked_success(
    success: pb::Success,
    limits: &RequestLimits,
) -> std::result::Result<(Vec<u8>, String), FieldViolation> {
    if success.result.len() + success.result_ref.len() > limits.max_result_bytes {
        return Err(too_large("success.result", limits.max_result_bytes));
    }
    check_text(
        "success.result_ref",
        &success.result_ref,
        limits.max_result_bytes,
    )?;
    Ok((success.result, success.result_ref))
}

/// A business failure's code and message.
fn checked_failure(failure: pb::Failure) -> std::result::Result<(String, String), FieldViolation> {
    check_text("failure.code", &failure.code, LABEL_MAX_BYTES)?;
    check_text("failure.message", &failure.message, MESSAGE_MAX_BYTES)?;
    Ok((failure.code, failure.message))
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
