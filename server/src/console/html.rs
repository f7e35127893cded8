//! The page frame and the small pieces every page uses: times in UTC with
//! relative ages, links to operations, JSON shown collapsible. maud escapes
//! every value it interpolates, so nothing stored can become markup.

use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::identity::Viewer;

/// Everything but the unreserved characters is escaped in a path segment,
/// so keys holding `/`, `?` or `#` stay one segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The pages of the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Operations,
    Due,
    Jobs,
    SignIn,
}

/// A whole page: the frame, the navigation, `content` in `<main>`.
pub fn page(
    viewer: Option<&Viewer>,
    section: Section,
    title: &str,
    content: Markup,
) -> Html<String> {
    let link = |target: Section, href: &str, label: &str| {
        html! {
            @if target == section {
                a href=(href) aria-current="page" { (label) }
            } @else {
                a href=(href) { (label) }
            }
        }
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · opreg console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header {
                    span.brand { "opreg" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Console" {
                            (link(Section::Overview, "/console/", "Overview"))
                            (link(Section::Operations, "/console/operations", "Operations"))
                            (link(Section::Due, "/console/due", "Due work"))
                            (link(Section::Jobs, "/console/jobs", "Jobs"))
                        }
                        span.who { "Signed in as " strong { (viewer.display_name()) } " (" (viewer.role_text()) ")" }
                        @if viewer.signed_in() {
                            form #sign-out method="post" action="/console/sign-out" {
                                input type="hidden" name="csrf" value=(viewer.csrf());
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main tabindex="-1" { (content) }
            }
        }
    };
    Html(markup.into_string())
}

/// A table's head: one column header per label.
pub fn column_heads(labels: &[&str]) -> Markup {
    html! {
        thead { tr { @for label in labels { th scope="col" { (label) } } } }
    }
}

/// A time as UTC, with its age relative to `now` beside it.
pub fn time(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339()) title=(at.to_rfc3339()) {
            (at.format("%Y-%m-%d %H:%M:%S UTC")) " "
            span.age { "(" (relative(at, now)) ")" }
        }
    }
}

/// An optional time, or a dash.
pub fn maybe_time(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Markup {
    match at {
        Some(at) => time(at, now),
        None => html! { span.none { "—" } },
    }
}

/// "3 min ago", "in 20 s".
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - at).num_seconds();
    let span = age(seconds.unsigned_abs() as f64);
    if seconds >= 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// A duration in seconds, in the largest unit that keeps it readable.
pub fn age(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 90.0 * 60.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if seconds < 36.0 * 3600.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} d", seconds / 86_400.0)
    }
}

/// The operation page's address.
pub fn operation_href(namespace: &str, key: &str) -> String {
    format!(
        "/console/operations/{}/{}",
        utf8_percent_encode(namespace, SEGMENT),
        utf8_percent_encode(key, SEGMENT)
    )
}

/// A query string from name-value pairs, each encoded.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        if !value.is_empty() {
            serializer.append_pair(name, value);
        }
    }
    serializer.finish()
}

/// Stored bytes as the operator should read them: indented JSON when they
/// are JSON, the text when they are text, hexadecimal otherwise.
pub fn payload(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => pretty_json(text).unwrap_or_else(|| text.to_owned()),
        Err(_) => format!("(binary, {} bytes) {}", bytes.len(), hex::encode(bytes)),
    }
}

/// JSON text indented, or `None` when it is not JSON.
pub fn pretty_json(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
}

/// Text in a collapsible block, open by default.
pub fn collapsible(summary: &str, text: &str) -> Markup {
    html! {
        details open {
            summary { (summary) }
            pre { code { (text) } }
        }
    }
}

/// A status as the contract names it (UNKNOWN, RETRY_SCHEDULED).
pub fn status_name(status: &str) -> String {
    status.to_ascii_uppercase()
}

/// A small message for the operator, announced to screen readers.
pub fn notice(text: &str) -> Markup {
    html! { p.notice role="status" { (text) } }
}

/// A refusal or failure, announced at once.
pub fn alert(text: &str) -> Markup {
    html! { p.alert role="alert" { (text) } }
}
