//! One operator action on one operation: a confirmation page that says what
//! will change, then the action itself. The form is turned into the
//! OperationAdmin request it stands for and validated by the same code as the
//! RPC, so the console can do nothing the API would refuse. The operator is
//! the signed-in principal, never a form field.

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::html;
use opreg_proto::v1 as pb;

use super::html::{Section, operation_href, page, status_name};
use super::identity::{Acting, Reading, Viewer};
use super::operations::{allowed_actions, known_action, target};
use super::{Console, ConsoleError, Fields};
use crate::access::Role;
use crate::domain::admin::Seen;
use crate::domain::commands::{AdminCommand, AdminTarget, LookupQuery};
use crate::domain::error::RegistryError;
use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::{Operation, Status};
use crate::grpc::requests;

pub async fn confirm(
    State(console): State<Console>,
    Reading(viewer): Reading,
    Path((namespace, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let (namespace, key) = target(namespace, key)?;
    viewer.authorize(Role::Admin, &namespace)?;
    let fields = Fields::parse(raw.unwrap_or_default().as_bytes());
    let action = fields.get("action").unwrap_or_default().to_owned();
    let operation = current(&console, &namespace, &key).await?;
    let href = operation_href(&namespace, &key);
    if !allowed_actions(&operation, Utc::now()).contains(&action.as_str()) {
        return Err(ConsoleError::BadInput(format!(
            "{} does not allow {action:?} now; the operation page lists what it allows.",
            status_name(operation.status.as_str())
        )));
    }
    let before = status_name(operation.status.as_str());
    let change = match action.as_str() {
        "resolve" => format!(
            "{before} → SUCCEEDED or FAILED, as you choose below. A live lease is revoked: its holder's report and fenced writes will be refused."
        ),
        "requeue" => format!(
            "{before} → RETRY_SCHEDULED, due now, with a fresh retry budget (the server's default policy)."
        ),
        "hold" if operation.lease_owner.is_some() => format!(
            "{before}, held. The live lease of {} is revoked: its report and fenced writes will be refused, and on release the outcome is UNKNOWN.",
            operation.lease_owner.as_deref().unwrap_or_default()
        ),
        "hold" => format!(
            "{before}, held: no claim, ClaimDue, expiry or retention touches it until released."
        ),
        _ => format!("{before}, held → not held: it goes back to the automatic steps."),
    };
    let label = known_action(&action).unwrap_or("Act");
    let body = html! {
        p.crumbs { a href=(href) { (key.as_str()) } " / " (label) }
        h1 { (label) " " (key.as_str()) }
        p #change { strong { "What will change: " } (change) }
        form #act method="post" action=(format!("{href}/act")) {
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="action" value=(action);
            // What the operator is looking at: the action applies only while
            // the operation still looks so.
            input type="hidden" name="seen_status" value=(operation.status.as_str());
            input type="hidden" name="seen_held" value=(operation.is_held());
            input type="hidden" name="seen_token" value=(operation.fencing_token.get());
            @if action == "resolve" {
                fieldset {
                    legend { "Outcome found in the remote system" }
                    label.check { input type="radio" name="outcome" value="success" checked; "Succeeded" }
                    label.check { input type="radio" name="outcome" value="failure"; "Failed" }
                }
                label for="result" { "Result, if it succeeded (JSON)" }
                textarea #result name="result" rows="4" {}
                label for="failure_code" { "Failure code, if it failed" }
                input #failure_code name="failure_code";
                label for="failure_message" { "Failure message, if it failed" }
                input #failure_message name="failure_message";
            }
            label for="reason" { "Reason" }
            textarea #reason name="reason" rows="3" required {}
            p.hint { "Recorded on the audit trail with your name, " strong { (viewer.display_name()) } "." }
            div.buttons {
                button type="submit" { "Confirm" }
                a href=(href) { "Cancel" }
            }
        }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Operations, label, body).into_response()))
}

pub async fn act(
    State(console): State<Console>,
    Path((namespace, key)): Path<(String, String)>,
    Acting(viewer, fields): Acting,
) -> Result<Response, ConsoleError> {
    let (namespace, key) = target(namespace, key)?;
    viewer.authorize(Role::Admin, &namespace)?;
    let action = fields.get("action").unwrap_or_default();
    let (target, command) = command(&console, &viewer, (&namespace, &key), action, &fields)?;
    let seen = seen(&fields)?;
    let change = match console.registry.act_as_seen(&target, &command, &seen).await {
        Err(RegistryError::InvalidTransition { current, held }) if seen != Seen::default() => {
            return Err(ConsoleError::Conflict(format!(
                "The operation changed since you looked (it is {}{} now): review it and act again.",
                status_name(current.as_str()),
                if held { ", held" } else { "" }
            )));
        }
        change => change?,
    };
    tracing::info!(
        namespace = %namespace, key = %key, action, principal = viewer.principal(),
        status_after = change.operation.status.as_str(), "console action recorded"
    );
    Ok(Redirect::to(&format!(
        "{}?done={action}",
        operation_href(&namespace, &key)
    ))
    .into_response())
}

/// The form as the OperationAdmin request it stands for, validated by the
/// RPC's own checks, with the viewer as operator and principal.
fn command(
    console: &Console,
    viewer: &Viewer,
    (namespace, key): (&Namespace, &OperationKey),
    action: &str,
    fields: &Fields,
) -> Result<(AdminTarget, AdminCommand), ConsoleError> {
    let (namespace, operation_key) = (namespace.to_string(), key.to_string());
    let operator = viewer.display_name().to_owned();
    let reason = fields.get("reason").unwrap_or_default().to_owned();
    let checked = match action {
        "resolve" => {
            use pb::resolve_operation_request::Outcome;
            let outcome = if fields.get("outcome") == Some("failure") {
                Outcome::Failure(pb::Failure {
                    code: fields.get("failure_code").unwrap_or_default().to_owned(),
                    message: fields.get("failure_message").unwrap_or_default().to_owned(),
                })
            } else {
                let result = fields.get("result").unwrap_or_default();
                if !result.is_empty() && serde_json::from_str::<serde_json::Value>(result).is_err()
                {
                    return Err(ConsoleError::BadInput(
                        "The result must be JSON (or empty).".into(),
                    ));
                }
                Outcome::Success(pb::Success {
                    result: result.as_bytes().to_vec(),
                    result_ref: String::new(),
                })
            };
            let request = pb::ResolveOperationRequest {
                namespace,
                operation_key,
                operator,
                reason,
                outcome: Some(outcome),
            };
            requests::resolve(request, &console.limits)
        }
        "requeue" => requests::requeue(
            pb::RequeueOperationRequest {
                namespace,
                operation_key,
                operator,
                reason,
                revision: String::new(),
                retry_policy: None,
            },
            &console.limits,
        ),
        "hold" => requests::hold(pb::HoldOperationRequest {
            namespace,
            operation_key,
            operator,
            reason,
        }),
        "release" => requests::release(pb::ReleaseOperationRequest {
            namespace,
            operation_key,
            operator,
            reason,
        }),
        other => {
            return Err(ConsoleError::BadInput(format!(
                "{other:?} is not an action (resolve, requeue, hold, release)"
            )));
        }
    };
    let (mut target, command) = checked?;
    target.actor.principal = viewer.principal().to_owned();
    Ok((target, command))
}

/// What the confirmation page showed, from its hidden fields; nothing when
/// the form did not say (then the rules alone decide, as over the API).
fn seen(fields: &Fields) -> Result<Seen, ConsoleError> {
    let stale = || {
        ConsoleError::BadInput("The form's record of the operation is damaged: reload it.".into())
    };
    let status = fields
        .get("seen_status")
        .map(|status| Status::try_from(status.to_owned()).map_err(|_| stale()))
        .transpose()?;
    let held = fields
        .get("seen_held")
        .map(|held| held.parse::<bool>().map_err(|_| stale()))
        .transpose()?;
    let token = fields
        .get("seen_token")
        .map(|token| {
            token
                .parse::<u64>()
                .ok()
                .and_then(|token| FencingToken::parse("seen_token", token).ok())
                .ok_or_else(stale)
        })
        .transpose()?;
    Ok(Seen {
        statuses: status.into_iter().collect(),
        held,
        token,
        lease_owner: None,
    })
}

async fn current(
    console: &Console,
    namespace: &Namespace,
    key: &OperationKey,
) -> Result<Operation, ConsoleError> {
    let answer = console
        .registry
        .lookup(&LookupQuery {
            namespace: namespace.clone(),
            operation_key: key.clone(),
            include_executions: false,
            include_audit: false,
        })
        .await?;
    Ok(answer.operation)
}
