//! The operations page (a filtered list in keyset pages, shareable as its
//! URL), the operation page (everything known about one operation), and the
//! due-work page (what ClaimDue hands out next, and the expired leases).

use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::html::{
    Section, collapsible, column_heads, maybe_time, notice, operation_href, page, payload,
    pretty_json, query, status_name, time,
};
use super::identity::{Reading, Viewer};
use super::{Console, ConsoleError, Fields, overview};
use crate::access::Role;
use crate::domain::admin::{self, Seen};
use crate::domain::commands::{FinishedQuery, ListQuery, Narrowing, PageCursor};
use crate::domain::ids::{Namespace, OperationKey};
use crate::domain::operation::{Operation, Status};
use crate::domain::text::{LABEL_MAX_BYTES, check_identifier};

/// The longest age a filter takes, as the API's `older_than` (a longer one
/// would leave PostgreSQL's range of times).
const MAX_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3_600);
/// Registration times a cursor may carry: from 1970 to 2300 (PostgreSQL's
/// range is wider; no operation is registered outside this one).
const CURSOR_MICROS: std::ops::RangeInclusive<i64> = 0..=10_413_792_000_000_000;

/// Rows on a page unless the filter says otherwise, and the most it may say.
const DEFAULT_PAGE_SIZE: u32 = 50;
const MAX_PAGE_SIZE: u32 = 200;

const UNFINISHED: &[Status] = &[
    Status::InProgress,
    Status::RetryScheduled,
    Status::Unknown,
    Status::Dead,
];
const FINISHED: &[Status] = &[Status::Succeeded, Status::Failed];

/// The operations page's filter: what its URL says, validated.
#[derive(Clone, Debug)]
pub struct Filter {
    pub namespace: Namespace,
    /// `unfinished`, `finished`, or one status.
    status: String,
    statuses: Vec<Status>,
    prefix: Option<String>,
    owner: Option<String>,
    older_than: Option<(String, Duration)>,
    held: bool,
    size: u32,
}

impl Filter {
    /// The filter of a query string or form; `None` without a namespace.
    pub fn parse(fields: &Fields) -> Result<Option<Self>, ConsoleError> {
        let Some(namespace) = fields.get("namespace") else {
            return Ok(None);
        };
        let namespace = Namespace::parse("namespace", namespace.to_owned())?;
        let status = fields.get("status").unwrap_or("unfinished").to_owned();
        let statuses = match status.as_str() {
            "unfinished" => UNFINISHED.to_vec(),
            "finished" => FINISHED.to_vec(),
            one => vec![
                Status::try_from(one.to_owned())
                    .map_err(|_| ConsoleError::BadInput(format!("{one:?} is not a status")))?,
            ],
        };
        let older_than = fields
            .get("older_than")
            .map(|text| {
                humantime::parse_duration(text)
                    .ok()
                    .filter(|age| *age <= MAX_AGE)
                    .map(|age| (text.to_owned(), age))
                    .ok_or_else(|| {
                        ConsoleError::BadInput(format!(
                            "{text:?} is not an age such as 5m or 2h (at most 100 years)"
                        ))
                    })
            })
            .transpose()?;
        let identifier =
            |field: &'static str, max: usize| -> Result<Option<String>, ConsoleError> {
                let Some(value) = fields.get(field) else {
                    return Ok(None);
                };
                check_identifier(field, value, max)?;
                Ok(Some(value.to_owned()))
            };
        let size = match fields.get("size") {
            None => DEFAULT_PAGE_SIZE,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|size| (1..=MAX_PAGE_SIZE).contains(size))
                .ok_or_else(|| {
                    ConsoleError::BadInput(format!("size must be 1 to {MAX_PAGE_SIZE}"))
                })?,
        };
        Ok(Some(Self {
            namespace,
            status,
            statuses,
            prefix: identifier("prefix", OperationKey::MAX_BYTES)?,
            owner: identifier("owner", LABEL_MAX_BYTES)?,
            older_than,
            held: fields.get("held").is_some(),
            size,
        }))
    }

    /// The filter as name-value pairs: its URL, and a bulk job's record of it.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut pairs = vec![
            ("namespace", self.namespace.as_str()),
            ("status", self.status.as_str()),
        ];
        pairs.extend(self.prefix.as_deref().map(|prefix| ("prefix", prefix)));
        pairs.extend(self.owner.as_deref().map(|owner| ("owner", owner)));
        pairs.extend(
            self.older_than
                .as_ref()
                .map(|(text, _)| ("older_than", text.as_str())),
        );
        if self.held {
            pairs.push(("held", "on"));
        }
        pairs
    }

    pub fn query_string(&self) -> String {
        query(&self.pairs())
    }

    /// What the operator saw through this filter: a bulk job acts on an
    /// operation only while it still matches it.
    pub fn seen(&self) -> Seen {
        Seen {
            statuses: self.statuses.clone(),
            held: self.held.then_some(true),
            token: None,
            lease_owner: self.owner.clone(),
        }
    }

    /// Finished statuses are listed by key, the others by registration time.
    fn by_key(&self) -> bool {
        self.statuses.iter().all(|status| FINISHED.contains(status))
    }
}

/// One page of a filter's operations, and the cursor of the next page.
pub async fn fetch_page(
    console: &Console,
    filter: &Filter,
    size: u32,
    after: Option<&str>,
    created_before: Option<DateTime<Utc>>,
) -> Result<(Vec<Operation>, Option<String>), ConsoleError> {
    let narrowing = Narrowing {
        key_prefix: filter.prefix.clone(),
        owner: filter.owner.clone(),
        created_before,
    };
    let bad_cursor =
        || ConsoleError::BadInput("the page cursor is not one this console gave".into());
    let (operations, more) = if filter.by_key() {
        let after = match after {
            None => None,
            Some(cursor) => {
                let key = cursor.strip_prefix('k').ok_or_else(bad_cursor)?;
                Some(OperationKey::parse("after", key.to_owned()).map_err(|_| bad_cursor())?)
            }
        };
        let page = console
            .registry
            .list_finished(&FinishedQuery {
                namespace: filter.namespace.clone(),
                statuses: filter.statuses.clone(),
                older_than: filter.older_than.as_ref().map(|(_, age)| *age),
                narrowing,
                page_size: size,
                after,
            })
            .await?;
        (page.operations, page.next.is_some())
    } else {
        let after = match after {
            None => None,
            Some(cursor) => {
                let (micros, key) = cursor
                    .strip_prefix('t')
                    .and_then(|rest| rest.split_once('.'))
                    .ok_or_else(bad_cursor)?;
                let created_at = micros
                    .parse::<i64>()
                    .ok()
                    .filter(|micros| CURSOR_MICROS.contains(micros))
                    .and_then(DateTime::from_timestamp_micros)
                    .ok_or_else(bad_cursor)?;
                let operation_key =
                    OperationKey::parse("after", key.to_owned()).map_err(|_| bad_cursor())?;
                Some(PageCursor {
                    created_at,
                    operation_key,
                })
            }
        };
        let page = console
            .registry
            .list(&ListQuery {
                namespace: filter.namespace.clone(),
                statuses: filter.statuses.clone(),
                expired_leases_only: false,
                older_than: filter.older_than.as_ref().map(|(_, age)| *age),
                held_only: filter.held,
                narrowing,
                page_size: size,
                after,
            })
            .await?;
        (page.operations, page.next.is_some())
    };
    let next = operations.last().filter(|_| more);
    let next = next.map(|last| cursor_of(filter, last));
    Ok((operations, next))
}

/// Where a page that ends with `operation` ends, as the filter orders it:
/// `k<key>` by key, `t<registration micros>.<key>` by registration time.
pub fn cursor_of(filter: &Filter, operation: &Operation) -> String {
    if filter.by_key() {
        format!("k{}", operation.operation_key)
    } else {
        format!(
            "t{}.{}",
            operation.created_at.timestamp_micros(),
            operation.operation_key
        )
    }
}

/// The first namespace the viewer may read, among those the gauges know.
fn first_namespace(console: &Console, viewer: &Viewer) -> Option<String> {
    overview::read_figures(&console.metrics.render())
        .into_keys()
        .find(|namespace| viewer.may(Role::Reader, namespace))
}

pub async fn list(
    State(console): State<Console>,
    Reading(viewer): Reading,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let fields = Fields::parse(raw.unwrap_or_default().as_bytes());
    let filter = Filter::parse(&fields)?;
    let now = Utc::now();
    let listing = match &filter {
        Some(filter) => {
            viewer.authorize(Role::Reader, &filter.namespace)?;
            let after = fields.get("after");
            let (operations, next) = fetch_page(&console, filter, filter.size, after, None).await?;
            Some((operations, next))
        }
        None => None,
    };
    let suggested = first_namespace(&console, &viewer);
    let namespace = filter
        .as_ref()
        .map(|filter| filter.namespace.to_string())
        .or(suggested)
        .unwrap_or_default();
    let chosen = |name: &str, value: &str| {
        filter.as_ref().is_some_and(|filter| match name {
            "status" => filter.status == value,
            _ => false,
        })
    };
    let text = |value: Option<&str>| value.unwrap_or_default().to_owned();
    let body = html! {
        h1 { "Operations" }
        form #filters method="get" action="/console/operations" {
            div.fields {
                label { "Namespace" input name="namespace" value=(namespace) required; }
                label { "Status"
                    select name="status" {
                        @for (value, label) in [("unfinished", "Unfinished"), ("in_progress", "IN_PROGRESS"), ("retry_scheduled", "RETRY_SCHEDULED"), ("unknown", "UNKNOWN"), ("dead", "DEAD"), ("finished", "Finished"), ("succeeded", "SUCCEEDED"), ("failed", "FAILED")] {
                            option value=(value) selected[chosen("status", value)] { (label) }
                        }
                    }
                }
                label { "Key prefix" input name="prefix" value=(text(fields.get("prefix"))); }
                label { "Lease owner" input name="owner" value=(text(fields.get("owner"))); }
                label { "Unchanged for at least" input name="older_than" placeholder="e.g. 30m" value=(text(fields.get("older_than"))); }
                label.check { input type="checkbox" name="held" checked[fields.get("held").is_some()]; "Held only" }
                label { "Per page" input name="size" type="number" min="1" max=(MAX_PAGE_SIZE) value=(fields.get("size").unwrap_or("50")); }
            }
            button type="submit" { "Filter" }
        }
        @if let (Some(filter), Some((operations, next))) = (&filter, &listing) {
            (operations_table(&viewer, filter, operations, next.as_deref(), now))
        }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Operations, "Operations", body).into_response()))
}

fn operations_table(
    viewer: &Viewer,
    filter: &Filter,
    operations: &[Operation],
    next: Option<&str>,
    now: DateTime<Utc>,
) -> Markup {
    let admin = viewer.may(Role::Admin, &filter.namespace);
    html! {
        p.hint {
            @if filter.by_key() { "Finished operations, by key." } @else { "Oldest registered first." }
            " This page's address is the filter: share or bookmark it."
        }
        form #bulk method="post" action="/console/jobs" {
            div.scroll {
                table #operations {
                    caption { (operations.len()) " operations on this page" }
                    thead { tr {
                        @if admin { th scope="col" { span.visually-hidden { "Select" } } }
                        th scope="col" { "Key" }
                        th scope="col" { "Status" }
                        th scope="col" { "Attempts" }
                        th scope="col" { "Lease owner" }
                        th scope="col" { "Registered" }
                        th scope="col" { "Last change" }
                    } }
                    tbody {
                        @for operation in operations {
                            tr data-key=(operation.operation_key.as_str()) {
                                @if admin {
                                    td { input type="checkbox" name="key" value=(operation.operation_key.as_str()) aria-label=(format!("Select {}", operation.operation_key)); }
                                }
                                th scope="row" { a href=(operation_href(&filter.namespace, &operation.operation_key)) { (operation.operation_key.as_str()) } }
                                td { (status_name(operation.status.as_str())) @if operation.is_held() { " " span.tag { "HELD" } } }
                                td { (operation.attempts) }
                                td { (operation.lease_owner.as_deref().unwrap_or("—")) }
                                td { (time(operation.created_at, now)) }
                                td { (time(operation.updated_at, now)) }
                            }
                        }
                    }
                }
            }
            @if operations.is_empty() { p { "Nothing matches this filter." } }
            nav.pages aria-label="Pages" {
                @if let Some(next) = next {
                    @let mut pairs = filter.pairs();
                    @let size = filter.size.to_string();
                    a rel="next" href=(format!("/console/operations?{}", { pairs.push(("size", &size)); pairs.push(("after", next)); query(&pairs) })) { "Next page" }
                }
                a href=(format!("/console/operations?{}", filter.query_string())) { "First page" }
            }
            @if admin {
                (bulk_form(viewer, filter))
            }
        }
    }
}

fn bulk_form(viewer: &Viewer, filter: &Filter) -> Markup {
    html! {
        fieldset.bulk {
            legend { "Bulk action" }
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="job_id" value=(hex::encode(rand::random::<[u8; 16]>()));
            @for (name, value) in filter.pairs() {
                input type="hidden" name=(format!("filter_{name}")) value=(value);
            }
            label for="bulk-action" { "Action" }
            select #bulk-action name="action" {
                option value="hold" { "Hold" }
                option value="release" { "Release" }
                option value="requeue" { "Requeue (DEAD only)" }
                option value="resolve_failure" { "Resolve as failed" }
            }
            label for="bulk-reason" { "Reason (recorded on each operation's audit trail)" }
            textarea #bulk-reason name="reason" rows="2" required {}
            div.buttons {
                button type="submit" name="scope" value="selection" { "Act on the selected" }
                button type="submit" name="scope" value="filter" { "Act on every match" }
            }
            p.hint { "Runs as a background job at a bounded rate; you can abort and resume it." }
        }
    }
}

/// The operation page's namespace and key, from the path.
pub fn target(namespace: String, key: String) -> Result<(Namespace, OperationKey), ConsoleError> {
    let namespace = Namespace::parse("namespace", namespace)?;
    let key = OperationKey::parse("operation_key", key)?;
    Ok((namespace, key))
}

/// The actions the status allows, for an admin.
pub fn allowed_actions(operation: &Operation, now: DateTime<Utc>) -> Vec<&'static str> {
    let mut actions = Vec::new();
    if admin::resolve(operation).is_ok() {
        actions.push("resolve");
    }
    if admin::requeue(operation).is_ok() {
        actions.push("requeue");
    }
    if admin::hold(operation, now).is_ok() {
        actions.push("hold");
    }
    if admin::release(operation).is_ok() {
        actions.push("release");
    }
    actions
}

pub async fn one(
    State(console): State<Console>,
    Reading(viewer): Reading,
    Path((namespace, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let (namespace, key) = target(namespace, key)?;
    viewer.authorize(Role::Reader, &namespace)?;
    let view = console.registry.operation_view(&namespace, &key).await?;
    let fields = Fields::parse(raw.unwrap_or_default().as_bytes());
    let now = Utc::now();
    let operation = &view.answer.operation;
    let hidden = console.payloads_hidden(&namespace);
    let href = operation_href(&namespace, &key);
    let body = html! {
        p.crumbs { a href=(format!("/console/operations?{}", query(&[("namespace", &namespace)]))) { (namespace.as_str()) } " / operation" }
        h1 { (key.as_str()) }
        @if let Some(done) = fields.get("done").and_then(known_action) { (notice(&format!("Recorded: {done}. The audit trail below has the new row."))) }
        dl.facts {
            dt { "Status" } dd #status { (status_name(operation.status.as_str())) @if operation.is_held() { " " span.tag { "HELD" } } @if operation.reconciling { " " span.tag { "RECONCILING" } } }
            dt { "Namespace" } dd { (namespace.as_str()) }
            dt { "Fencing token" } dd { (operation.fencing_token.get()) }
            dt { "Attempts" } dd { (operation.attempts) " of " (operation.budget.max_attempts) }
            dt { "Lease" } dd { @match (&operation.lease_owner, operation.lease_expires_at) {
                (Some(owner), Some(expires)) => { (owner) ", expires " (time(expires, now)) },
                _ => { "none" },
            } }
            dt { "Next attempt" } dd { (maybe_time(operation.next_attempt_at, now)) }
            dt { "Registered" } dd { (time(operation.created_at, now)) }
            dt { "Last change" } dd { (time(operation.updated_at, now)) }
            dt { "Finished" } dd { (maybe_time(operation.completed_at, now)) }
            @if let Some(class) = &operation.last_error_class { dt { "Last error" } dd { (class) ": " (operation.last_error_message.as_deref().unwrap_or("")) } }
            @if let Some(code) = &operation.failure_code { dt { "Failure" } dd { (code) ": " (operation.failure_message.as_deref().unwrap_or("")) } }
        }
        @if viewer.may(Role::Admin, &namespace) {
            @let actions = allowed_actions(operation, now);
            @if !actions.is_empty() {
                nav.actions aria-label="Actions" {
                    @for action in actions {
                        a.button data-action=(action) href=(format!("{href}/act?action={action}")) { (known_action(action).unwrap_or(action)) }
                    }
                }
            }
        }
        section #parameters {
            h2 { "Parameters" }
            @if hidden { p { "Hidden for this namespace (OPREG_CONSOLE_HIDDEN_PAYLOADS)." } }
            @else if let Some(text) = &operation.parameters_canonical {
                (collapsible("Parameters (JSON)", &pretty_json(text).unwrap_or_else(|| text.clone())))
            } @else {
                p { "Given as a digest only: " code { (hex::encode(&operation.parameters_digest)) } }
            }
        }
        section #result {
            h2 { "Result" }
            @if hidden { p { "Hidden for this namespace (OPREG_CONSOLE_HIDDEN_PAYLOADS)." } }
            @else if let Some(result) = &operation.result {
                (collapsible("Result", &payload(result)))
            } @else { p { "No result recorded." } }
            @if let Some(reference) = &operation.result_ref { p { "Result reference: " code { (reference) } } }
            @if let Some(reference) = &operation.remote_ref { p { "Remote reference: " code { (reference) } } }
        }
        section #compensation {
            h2 { "Compensation" }
            @match (&operation.compensates, &operation.compensated_by) {
                (None, None) => p { "Neither compensates nor is compensated." },
                (compensates, compensated_by) => ul {
                    @if let Some(original) = compensates { li { "Compensates " a href=(operation_href(&namespace, original)) { (original.as_str()) } } }
                    @if let Some(by) = compensated_by { li { "Compensated by " a href=(operation_href(&namespace, by)) { (by.as_str()) } } }
                },
            }
        }
        section {
            h2 { "Executions" }
            ol #executions.timeline {
                @for execution in &view.answer.executions {
                    li {
                        strong { "Attempt " (execution.attempt) " · " (execution.kind.as_str()) " · " (execution.outcome.as_str()) }
                        div { "Owner " (execution.owner) ", token " (execution.fencing_token.get()) ", execution id " code { (execution.execution_id) } }
                        div { "Started " (time(execution.started_at, now)) " · ended " (maybe_time(execution.finished_at, now)) }
                        @if let Some(class) = &execution.error_class { div { "Error " (class) ": " (execution.message.as_deref().unwrap_or("")) } }
                    }
                }
            }
            @if view.answer.executions.is_empty() { p { "No executions." } }
        }
        section #resources {
            h2 { "Fenced resources last written by it" }
            @if view.resources.is_empty() { p { "None." } } @else {
                div.scroll { table {
                    (column_heads(&["Resource", "Fence", "Version", "Written", "Value"]))
                    tbody { @for (name, resource) in &view.resources {
                        tr { th scope="row" { (name) } td { (resource.fence.get()) } td { (resource.version) } td { (time(resource.updated_at, now)) }
                             td { @if hidden { "hidden" } @else { code { (payload(&resource.value)) } } } }
                    } }
                } }
            }
        }
        section {
            h2 { "Audit trail" }
            div.scroll { table #audit {
                (column_heads(&["When", "Action", "Operator", "Principal", "Reason", "Change"]))
                tbody { @for entry in &view.answer.audit {
                    tr {
                        td { (time(entry.at, now)) }
                        td data-cell="action" { (entry.action.as_str()) }
                        td data-cell="operator" { (entry.operator) }
                        td data-cell="principal" { (entry.principal) }
                        td data-cell="reason" { (entry.reason) }
                        td { (status_name(entry.status_before.as_str())) @if entry.held_before { " (held)" } " → " (status_name(entry.status_after.as_str())) @if entry.held_after { " (held)" } }
                    }
                } }
            } }
            @if view.answer.audit.is_empty() { p { "No operator has acted on it." } }
        }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Operations, key.as_str(), body).into_response()))
}

/// The label of an action the console knows, or `None`.
pub fn known_action(action: &str) -> Option<&'static str> {
    match action {
        "resolve" => Some("Resolve"),
        "requeue" => Some("Requeue"),
        "hold" => Some("Hold"),
        "release" => Some("Release"),
        _ => None,
    }
}

/// Most rows of each table on the due-work page.
const DUE_SHOWN: u32 = 50;

pub async fn due(
    State(console): State<Console>,
    Reading(viewer): Reading,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let fields = Fields::parse(raw.unwrap_or_default().as_bytes());
    let namespace = fields
        .get("namespace")
        .map(str::to_owned)
        .or_else(|| first_namespace(&console, &viewer));
    let now = Utc::now();
    let tables = match &namespace {
        Some(namespace) => {
            let namespace = Namespace::parse("namespace", namespace.clone())?;
            viewer.authorize(Role::Reader, &namespace)?;
            let due = console
                .registry
                .due_preview(&namespace, false, DUE_SHOWN)
                .await?;
            let expired = console
                .registry
                .due_preview(&namespace, true, DUE_SHOWN)
                .await?;
            Some((namespace, due, expired))
        }
        None => None,
    };
    let body = html! {
        h1 { "Due work" }
        form #due-filter method="get" action="/console/due" {
            label { "Namespace" input name="namespace" value=(namespace.clone().unwrap_or_default()) required; }
            button type="submit" { "Show" }
        }
        @if let Some((namespace, due, expired)) = &tables {
            h2 { "What ClaimDue hands out next" }
            (due_table("due", namespace, due, now))
            h2 { "Expired leases, not yet taken over" }
            (due_table("expired", namespace, expired, now))
        }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Due, "Due work", body).into_response()))
}

fn due_table(
    id: &str,
    namespace: &Namespace,
    operations: &[Operation],
    now: DateTime<Utc>,
) -> Markup {
    html! {
        @if operations.is_empty() { p { "Nothing." } } @else {
            div.scroll { table id=(id) {
                (column_heads(&["Key", "Status", "Due since", "Attempts", "Lease owner"]))
                tbody { @for operation in operations {
                    tr data-key=(operation.operation_key.as_str()) {
                        th scope="row" { a href=(operation_href(namespace, &operation.operation_key)) { (operation.operation_key.as_str()) } }
                        td { (status_name(operation.status.as_str())) }
                        td { (maybe_time(operation.next_attempt_at.or(operation.lease_expires_at), now)) }
                        td { (operation.attempts) }
                        td { (operation.lease_owner.as_deref().unwrap_or("—")) }
                    }
                } }
            } }
        }
    }
}
