//! Responses as JSON (for scripts) or as aligned `field  value` lines (for people).

use std::io::Write;

use opreg_client::proto as pb;
use serde_json::{Map, Value, json};

pub struct Output {
    json: bool,
}

impl Output {
    pub fn new(json: bool) -> Self {
        Self { json }
    }

    pub fn claim(&self, claimed: &pb::ClaimResponse) {
        let mut value = json!({ "outcome": claimed.outcome().as_str_name().trim_start_matches("CLAIM_OUTCOME_") });
        if let Some(lease) = &claimed.lease {
            value["lease"] = lease_json(lease);
        }
        if let Some(wait) = &claimed.retry_after {
            value["retry_after"] = seconds(wait);
        }
        if let Some(waited) = &claimed.waited {
            value["waited"] = seconds(waited);
        }
        value["operation"] = operation_json(&claimed.operation.clone().unwrap_or_default());
        self.print(value);
    }

    pub fn lookup(&self, found: &pb::LookupResponse) {
        let mut value = operation_json(&found.operation.clone().unwrap_or_default());
        if !found.executions.is_empty() {
            value["executions"] =
                Value::Array(found.executions.iter().map(execution_json).collect());
        }
        if !found.audit.is_empty() {
            value["audit"] = Value::Array(found.audit.iter().map(audit_json).collect());
        }
        if let Some(waited) = &found.waited {
            value["waited"] = seconds(waited);
        }
        self.print(value);
    }

    pub fn due(&self, handed: &pb::ClaimDueResponse) {
        let operations = handed
            .operations
            .iter()
            .map(|due| {
                let mut value = json!({
                    "outcome": due.outcome().as_str_name().trim_start_matches("CLAIM_OUTCOME_"),
                });
                if let Some(lease) = &due.lease {
                    value["lease"] = lease_json(lease);
                }
                value["operation"] = operation_json(&due.operation.clone().unwrap_or_default());
                value
            })
            .collect();
        self.print(json!({ "operations": Value::Array(operations) }));
    }

    pub fn queue(&self, page: &pb::ListOperationsResponse) {
        let mut value = json!({
            "operations": Value::Array(page.operations.iter().map(operation_json).collect()),
        });
        if !page.next_page_token.is_empty() {
            value["next_page_token"] = json!(page.next_page_token);
        }
        self.print(value);
    }

    /// An operator action: the operation after it and the audit row it wrote.
    pub fn action(&self, operation: Option<&pb::Operation>, audit: Option<&pb::AuditEntry>) {
        self.print(json!({
            "operation": operation_json(&operation.cloned().unwrap_or_default()),
            "audit": audit_json(&audit.cloned().unwrap_or_default()),
        }));
    }

    pub fn operation(&self, operation: &pb::Operation) {
        self.print(operation_json(operation));
    }

    pub fn lease(&self, lease: &pb::Lease) {
        self.print(lease_json(lease));
    }

    pub fn resource(&self, resource: &pb::GetResourceResponse) {
        let mut value = json!({
            "fence": resource.fence,
            "version": resource.version,
            "operation_key": resource.operation_key,
            "updated_at": timestamp(resource.updated_at.as_ref()),
        });
        put_bytes(&mut value, "value", &resource.value);
        self.print(value);
    }

    pub fn written(&self, written: &pb::FencedWriteResponse) {
        self.print(json!({ "fence": written.fence, "version": written.version }));
    }

    /// Writes to stdout; a closed pipe (`| head`) ends the output quietly.
    fn print(&self, value: Value) {
        let mut out = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
            return;
        }
        let mut rows = Vec::new();
        flatten("", &value, &mut rows);
        let width = rows.iter().map(|(field, _)| field.len()).max().unwrap_or(0);
        for (field, text) in rows {
            if writeln!(out, "{field:width$}  {text}").is_err() {
                return;
            }
        }
    }
}

fn operation_json(operation: &pb::Operation) -> Value {
    let mut value = json!({
        "namespace": operation.namespace,
        "operation_key": operation.operation_key,
        "status": operation.status().as_str_name().trim_start_matches("OPERATION_STATUS_"),
        "parameters_digest": hex::encode(&operation.parameters_digest),
        "attempts": operation.attempts,
        "created_at": timestamp(operation.created_at.as_ref()),
        "updated_at": timestamp(operation.updated_at.as_ref()),
    });
    let object = value.as_object_mut().expect("an object");
    let mut optional = |field: &str, text: &str| {
        if !text.is_empty() {
            object.insert(field.into(), json!(text));
        }
    };
    optional("result_ref", &operation.result_ref);
    optional("remote_ref", &operation.remote_ref);
    optional("compensates", &operation.compensates);
    optional("compensated_by", &operation.compensated_by);
    optional("last_error_class", &operation.last_error_class);
    optional("last_error_message", &operation.last_error_message);
    optional(
        "next_attempt_at",
        &timestamp(operation.next_attempt_at.as_ref()),
    );
    optional("completed_at", &timestamp(operation.completed_at.as_ref()));
    if operation.reconciling {
        object.insert("reconciling".into(), json!(true));
    }
    if operation.held {
        object.insert("held".into(), json!(true));
        object.insert(
            "held_at".into(),
            json!(timestamp(operation.held_at.as_ref())),
        );
    }
    if let Some(parameters) = &operation.parameters {
        object.insert("parameters".into(), struct_json(parameters));
    }
    if let Some(failure) = &operation.failure {
        object.insert(
            "failure".into(),
            json!({ "code": failure.code, "message": failure.message }),
        );
    }
    if let Some(lease) = &operation.lease {
        object.insert("lease".into(), lease_json(lease));
    }
    if !operation.result.is_empty() {
        put_bytes(&mut value, "result", &operation.result);
    }
    value
}

fn lease_json(lease: &pb::Lease) -> Value {
    json!({
        "owner": lease.owner,
        "fencing_token": lease.fencing_token,
        "expires_at": timestamp(lease.expires_at.as_ref()),
        "attempt": lease.attempt,
        "takeover": lease.takeover,
    })
}

fn execution_json(execution: &pb::Execution) -> Value {
    json!({
        "attempt": execution.attempt,
        "kind": execution.kind().as_str_name().trim_start_matches("EXECUTION_KIND_"),
        "outcome": execution.outcome().as_str_name().trim_start_matches("EXECUTION_OUTCOME_"),
        "fencing_token": execution.fencing_token,
        "owner": execution.owner,
        "execution_id": execution.execution_id,
        "started_at": timestamp(execution.started_at.as_ref()),
        "finished_at": timestamp(execution.finished_at.as_ref()),
        "error_class": execution.error_class,
        "message": execution.message,
    })
}

fn audit_json(entry: &pb::AuditEntry) -> Value {
    let status = |status: pb::OperationStatus| {
        status
            .as_str_name()
            .trim_start_matches("OPERATION_STATUS_")
            .to_owned()
    };
    json!({
        "action": entry.action().as_str_name().trim_start_matches("ADMIN_ACTION_"),
        "operator": entry.operator,
        "reason": entry.reason,
        "revision": entry.revision,
        "principal": entry.principal,
        "status_before": status(entry.status_before()),
        "status_after": status(entry.status_after()),
        "held_before": entry.held_before,
        "held_after": entry.held_after,
        "token_before": entry.token_before,
        "token_after": entry.token_after,
        "at": timestamp(entry.at.as_ref()),
    })
}

fn struct_json(object: &prost_types::Struct) -> Value {
    Value::Object(
        object
            .fields
            .iter()
            .map(|(name, value)| (name.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(flag)) => json!(flag),
        Some(Kind::NumberValue(number)) => json!(number),
        Some(Kind::StringValue(text)) => json!(text),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_json).collect()),
        Some(Kind::StructValue(object)) => struct_json(object),
    }
}

/// Bytes as text when they are UTF-8, else as hex under `<field>_hex`.
fn put_bytes(value: &mut Value, field: &str, bytes: &[u8]) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    match std::str::from_utf8(bytes) {
        Ok(text) => object.insert(field.into(), json!(text)),
        Err(_) => object.insert(format!("{field}_hex"), json!(hex::encode(bytes))),
    };
}

/// RFC 3339 in UTC, or empty.
fn timestamp(at: Option<&prost_types::Timestamp>) -> String {
    at.map(ToString::to_string).unwrap_or_default()
}

fn flatten(prefix: &str, value: &Value, rows: &mut Vec<(String, String)>) {
    match value {
        Value::Object(members) => flatten_object(prefix, members, rows),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{index}]"), item, rows);
            }
        }
        Value::String(text) => rows.push((prefix.to_owned(), text.clone())),
        other => rows.push((prefix.to_owned(), other.to_string())),
    }
}

fn flatten_object(prefix: &str, members: &Map<String, Value>, rows: &mut Vec<(String, String)>) {
    for (field, member) in members {
        let path = if prefix.is_empty() {
            field.clone()
        } else {
            format!("{prefix}.{field}")
        };
        flatten(&path, member, rows);
    }
}

/// A duration as `<seconds>.<nanoseconds>s`.
fn seconds(duration: &prost_types::Duration) -> Value {
    json!(format!("{}.{:09}s", duration.seconds, duration.nanos))
}
