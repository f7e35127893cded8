//! Domain records into protobuf messages.

use chrono::{DateTime, Utc};
use opreg_proto::v1 as pb;

use crate::domain::admin::{AdminAction, AuditEntry};
use crate::domain::claim::ClaimOutcome;
use crate::domain::operation::{
    Execution, ExecutionKind, ExecutionOutcome, Lease, Operation, Resource, Status,
};
use crate::registry::{AdminChange, ClaimAnswer, LookupAnswer, QueuePage};

/// Whether an operation's stored parameters travel with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parameters {
    Included,
    Omitted,
}

pub fn claim(answer: ClaimAnswer) -> pb::ClaimResponse {
    pb::ClaimResponse {
        outcome: claim_outcome(answer.outcome).into(),
        lease: answer.lease().map(lease),
        retry_after: answer.retry_after.map(duration),
        operation: Some(operation(answer.operation, Parameters::Omitted)),
        waited: None,
    }
}

pub fn claim_due(handed: Vec<ClaimAnswer>) -> pb::ClaimDueResponse {
    pb::ClaimDueResponse {
        operations: handed
            .into_iter()
            .map(|answer| pb::DueOperation {
                outcome: claim_outcome(answer.outcome).into(),
                lease: answer.lease().map(lease),
                operation: Some(operation(answer.operation, Parameters::Included)),
            })
            .collect(),
    }
}

pub fn lookup(answer: LookupAnswer, parameters: Parameters) -> pb::LookupResponse {
    pb::LookupResponse {
        operation: Some(operation(answer.operation, parameters)),
        executions: answer.executions.into_iter().map(execution).collect(),
        audit: answer.audit.into_iter().map(audit).collect(),
        waited: None,
    }
}

pub fn queue_page(page: QueuePage) -> pb::ListOperationsResponse {
    pb::ListOperationsResponse {
        operations: page
            .operations
            .into_iter()
            .map(|found| operation(found, Parameters::Omitted))
            .collect(),
        next_page_token: page
            .next
            .as_ref()
            .map(super::requests::encode_page_token)
            .unwrap_or_default(),
    }
}

/// Every admin action answers with the operation after it and its audit row,
/// each in the response message of its own RPC.
macro_rules! admin_responses {
    ($($function:ident => $message:ident),+ $(,)?) => {
        $(
            pub fn $function(change: AdminChange) -> pb::$message {
                pb::$message {
                    operation: Some(operation(change.operation, Parameters::Omitted)),
                    audit: Some(audit(change.audit)),
                }
            }
        )+
    };
}

admin_responses!(
    resolved => ResolveOperationResponse,
    requeued => RequeueOperationResponse,
    held => HoldOperationResponse,
    released => ReleaseOperationResponse,
);

pub fn audit(entry: AuditEntry) -> pb::AuditEntry {
    pb::AuditEntry {
        action: admin_action(entry.action).into(),
        operator: entry.operator,
        reason: entry.reason,
        revision: entry.revision,
        principal: entry.principal,
        status_before: status(entry.status_before).into(),
        status_after: status(entry.status_after).into(),
        token_before: entry.token_before.get(),
        token_after: entry.token_after.get(),
        at: Some(timestamp(entry.at)),
        held_before: entry.held_before,
        held_after: entry.held_after,
    }
}

pub fn operation(operation: Operation, parameters: Parameters) -> pb::Operation {
    let lease = operation.lease().map(lease);
    let failure = operation.failure_code.is_some().then(|| pb::Failure {
        code: operation.failure_code.clone().unwrap_or_default(),
        message: operation.failure_message.clone().unwrap_or_default(),
    });
    let parameters = match parameters {
        Parameters::Included => operation
            .parameters_canonical
            .as_deref()
            .and_then(structure),
        Parameters::Omitted => None,
    };
    pb::Operation {
        namespace: operation.namespace.into_string(),
        operation_key: operation.operation_key.into_string(),
        status: status(operation.status).into(),
        parameters_digest: operation.parameters_digest,
        result: operation.result.unwrap_or_default(),
        result_ref: operation.result_ref.unwrap_or_default(),
        failure,
        attempts: operation.attempts,
        lease,
        next_attempt_at: operation.next_attempt_at.map(timestamp),
        remote_ref: operation.remote_ref.unwrap_or_default(),
        reconciling: operation.reconciling,
        compensates: operation
            .compensates
            .map(|key| key.into_string())
            .unwrap_or_default(),
        compensated_by: operation
            .compensated_by
            .map(|key| key.into_string())
            .unwrap_or_default(),
        created_at: Some(timestamp(operation.created_at)),
        updated_at: Some(timestamp(operation.updated_at)),
        completed_at: operation.completed_at.map(timestamp),
        last_error_class: operation.last_error_class.unwrap_or_default(),
        last_error_message: operation.last_error_message.unwrap_or_default(),
        held: operation.held_at.is_some(),
        held_at: operation.held_at.map(timestamp),
        parameters,
    }
}

pub fn lease(lease: Lease) -> pb::Lease {
    pb::Lease {
        owner: lease.owner,
        fencing_token: lease.fencing_token.get(),
        expires_at: Some(timestamp(lease.expires_at)),
        attempt: lease.attempt,
        takeover: lease.takeover,
    }
}

pub fn execution(execution: Execution) -> pb::Execution {
    pb::Execution {
        attempt: execution.attempt,
        execution_id: execution.execution_id,
        owner: execution.owner,
        fencing_token: execution.fencing_token.get(),
        started_at: Some(timestamp(execution.started_at)),
        finished_at: execution.finished_at.map(timestamp),
        outcome: execution_outcome(execution.outcome).into(),
        error_class: execution.error_class.unwrap_or_default(),
        message: execution.message.unwrap_or_default(),
        kind: execution_kind(execution.kind).into(),
    }
}

pub fn resource(resource: Resource) -> pb::GetResourceResponse {
    pb::GetResourceResponse {
        value: resource.value,
        fence: resource.fence.get(),
        version: resource.version,
        updated_at: Some(timestamp(resource.updated_at)),
        operation_key: resource.operation_key.into_string(),
    }
}

fn claim_outcome(outcome: ClaimOutcome) -> pb::ClaimOutcome {
    match outcome {
        ClaimOutcome::Acquired => pb::ClaimOutcome::Acquired,
        ClaimOutcome::Replayed => pb::ClaimOutcome::Replayed,
        ClaimOutcome::InProgress => pb::ClaimOutcome::InProgress,
        ClaimOutcome::RetryLater => pb::ClaimOutcome::RetryLater,
        ClaimOutcome::Reconcile => pb::ClaimOutcome::Reconcile,
        ClaimOutcome::Dead => pb::ClaimOutcome::Dead,
        ClaimOutcome::Held => pb::ClaimOutcome::Held,
    }
}

fn admin_action(action: AdminAction) -> pb::AdminAction {
    match action {
        AdminAction::Resolve => pb::AdminAction::Resolve,
        AdminAction::Requeue => pb::AdminAction::Requeue,
        AdminAction::Hold => pb::AdminAction::Hold,
        AdminAction::Release => pb::AdminAction::Release,
        AdminAction::Reuse => pb::AdminAction::Reuse,
        AdminAction::Restore => pb::AdminAction::Restore,
    }
}

pub fn status(status: Status) -> pb::OperationStatus {
    match status {
        Status::InProgress => pb::OperationStatus::InProgress,
        Status::Succeeded => pb::OperationStatus::Succeeded,
        Status::Failed => pb::OperationStatus::Failed,
        Status::RetryScheduled => pb::OperationStatus::RetryScheduled,
        Status::Unknown => pb::OperationStatus::Unknown,
        Status::Dead => pb::OperationStatus::Dead,
    }
}

fn execution_kind(kind: ExecutionKind) -> pb::ExecutionKind {
    match kind {
        ExecutionKind::First => pb::ExecutionKind::First,
        ExecutionKind::Retry => pb::ExecutionKind::Retry,
        ExecutionKind::Takeover => pb::ExecutionKind::Takeover,
        ExecutionKind::Reconcile => pb::ExecutionKind::Reconcile,
        ExecutionKind::Reuse => pb::ExecutionKind::Reuse,
    }
}

fn execution_outcome(outcome: ExecutionOutcome) -> pb::ExecutionOutcome {
    match outcome {
        ExecutionOutcome::Running => pb::ExecutionOutcome::Running,
        ExecutionOutcome::Succeeded => pb::ExecutionOutcome::Succeeded,
        ExecutionOutcome::Failed => pb::ExecutionOutcome::Failed,
        ExecutionOutcome::Retryable => pb::ExecutionOutcome::Retryable,
        ExecutionOutcome::Unknown => pb::ExecutionOutcome::Unknown,
        ExecutionOutcome::Superseded => pb::ExecutionOutcome::Superseded,
        ExecutionOutcome::Revoked => pb::ExecutionOutcome::Revoked,
    }
}

fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

pub(crate) fn duration(duration: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

/// The stored canonical text of Struct parameters, as a Struct again. The text
/// is RFC 8785 JSON the server wrote itself, so it always parses.
fn structure(canonical: &str) -> Option<prost_types::Struct> {
    serde_json::from_str(canonical)
        .ok()
        .map(crate::domain::parameters::json_to_struct)
}
