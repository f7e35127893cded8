//! The operator console: web pages for the manual queue, served on the HTTP
//! port beside /metrics. Server-rendered HTML (maud, checked and escaped at
//! compile time), one stylesheet and one small script compiled into the
//! binary: no build step, no CDN, every page usable without script. Pages
//! read through the registry like the gRPC API; actions go through the same
//! validation and the same guarded statements as OperationAdmin's RPCs.
//!
//! - [`identity`]: sign-in, sessions, CSRF, the loopback rule.
//! - [`overview`]: the backlog from the server's own gauges and counters.
//! - [`operations`]: the filtered list and the operation page.
//! - [`actions`]: confirm, then act on one operation.
//! - [`jobs`]: bulk actions as background jobs, and their runner.

mod actions;
mod html;
mod identity;
mod jobs;
mod operations;
mod overview;

use std::sync::Arc;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::access::Access;
use crate::config::ConsoleSettings;
use crate::domain::error::{FieldViolation, RegistryError};
use crate::grpc::RequestLimits;
use crate::registry::Registry;

pub use jobs::run_jobs_forever;
pub use overview::sample_forever;

/// What every console request needs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Console {
    registry: Registry,
    access: Access,
    settings: Arc<ConsoleSettings>,
    limits: RequestLimits,
    metrics: PrometheusHandle,
    history: overview::History,
}

impl Console {
    pub fn new(
        registry: Registry,
        access: Access,
        settings: ConsoleSettings,
        limits: RequestLimits,
        metrics: PrometheusHandle,
    ) -> Self {
        Self {
            registry,
            access,
            settings: Arc::new(settings),
            limits,
            metrics,
            history: overview::History::default(),
        }
    }

    fn payloads_hidden(&self, namespace: &str) -> bool {
        self.settings.hidden_payloads.contains(namespace)
    }
}

/// The console's routes, all under /console.
pub fn router(console: Console) -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(overview::show))
        .route(
            "/console/sign-in",
            get(identity::sign_in_page).post(identity::sign_in),
        )
        .route("/console/sign-out", axum::routing::post(identity::sign_out))
        .route("/console/operations", get(operations::list))
        .route(
            "/console/operations/{namespace}/{key}",
            get(operations::one),
        )
        .route(
            "/console/operations/{namespace}/{key}/act",
            get(actions::confirm).post(actions::act),
        )
        .route("/console/due", get(operations::due))
        .route("/console/jobs", get(jobs::list).post(jobs::submit))
        .route("/console/jobs/{id}", get(jobs::one))
        .route(
            "/console/jobs/{id}/{verb}",
            axum::routing::post(jobs::switch),
        )
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/assets/console.js", get(script))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            frame_refusals,
        ))
        .layer(axum::middleware::map_response(protective_headers))
        .with_state(console)
}

/// No framing, no inline script or style, no sniffing, nothing cached.
async fn protective_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
}

/// Why a console request was not served. Each answers with a page that says
/// so in words; none carries database text.
#[derive(Debug)]
pub enum ConsoleError {
    /// A page was asked for without a session: go to the sign-in form.
    SignInNeeded,
    /// A state-changing request without a session.
    Unauthenticated,
    Forbidden(String),
    BadInput(String),
    /// The request met a state that changed under it (409).
    Conflict(String),
    NotFound(&'static str),
    Registry(RegistryError),
}

/// A field the form or URL got wrong, in the check's own words.
impl From<FieldViolation> for ConsoleError {
    fn from(violation: FieldViolation) -> Self {
        Self::BadInput(violation.description)
    }
}

impl From<RegistryError> for ConsoleError {
    fn from(error: RegistryError) -> Self {
        Self::Registry(error)
    }
}

/// A refusal's words, kept on its response so [`frame_refusals`] can show
/// them in the signed-in viewer's frame.
#[derive(Clone, Debug)]
struct Refusal(String);

fn refusal_page(
    viewer: Option<&identity::Viewer>,
    status: StatusCode,
    message: &str,
) -> axum::response::Html<String> {
    let title = status.canonical_reason().unwrap_or("Refused");
    html::page(
        viewer,
        html::Section::SignIn,
        title,
        maud::html! {
            h1 { (title) }
            (html::alert(message))
            p { a href="/console/" { "Back to the overview" } }
        },
    )
}

/// Shows a refusal inside the frame of the viewer who met it (navigation,
/// sign-out), when there is one: errors are made before the viewer is at hand.
async fn frame_refusals(
    State(console): State<Console>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers().clone();
    let response = next.run(request).await;
    let Some(Refusal(message)) = response.extensions().get::<Refusal>().cloned() else {
        return response;
    };
    match identity::identify(&console, &headers, peer, false).await {
        Ok(viewer) => {
            let status = response.status();
            viewer.finish((status, refusal_page(Some(&viewer), status, &message)).into_response())
        }
        Err(_) => response,
    }
}

impl ConsoleError {
    /// The status and the words a page shows for it; `None` for a page that
    /// sends the browser to the sign-in form instead.
    fn status_and_message(self) -> Option<(StatusCode, String)> {
        Some(match self {
            Self::SignInNeeded => return None,
            Self::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "Sign in first: this request needs a session.".to_owned(),
            ),
            Self::Forbidden(message) => (StatusCode::FORBIDDEN, message),
            Self::BadInput(message) => (StatusCode::BAD_REQUEST, message),
            Self::Conflict(message) => (StatusCode::CONFLICT, message),
            Self::NotFound(what) => (StatusCode::NOT_FOUND, format!("No such {what}.")),
            Self::Registry(error) => (registry_status(&error), error.to_string()),
        })
    }

    /// Its words alone, for a job's page.
    pub fn message(self) -> String {
        match self.status_and_message() {
            Some((_, message)) => message,
            None => "sign in again".to_owned(),
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let Some((status, message)) = self.status_and_message() else {
            return Redirect::to("/console/sign-in").into_response();
        };
        let mut response = (status, refusal_page(None, status, &message)).into_response();
        response.extensions_mut().insert(Refusal(message));
        response
    }
}

/// The HTTP status of a registry error; the message is its own text, which
/// never carries database text (internal errors say only "internal error").
fn registry_status(error: &RegistryError) -> StatusCode {
    match error {
        RegistryError::PermissionDenied { .. } => StatusCode::FORBIDDEN,
        RegistryError::Unauthenticated => StatusCode::UNAUTHORIZED,
        RegistryError::OperationNotFound | RegistryError::ResourceNotFound => StatusCode::NOT_FOUND,
        RegistryError::InvalidTransition { .. } | RegistryError::OperationExists { .. } => {
            StatusCode::CONFLICT
        }
        RegistryError::InvalidArgument(_)
        | RegistryError::Malformed { .. }
        | RegistryError::MessageTooLarge { .. } => StatusCode::BAD_REQUEST,
        RegistryError::StoreUnavailable
        | RegistryError::OperationBusy
        | RegistryError::Overloaded
        | RegistryError::RateLimited { .. }
        | RegistryError::TooManyWaiters { .. }
        | RegistryError::DeadlineExceeded => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The name-value pairs of a query string or a form body, in order; a name
/// may repeat (the selected keys of a bulk action).
#[derive(Clone, Debug, Default)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    pub fn parse(bytes: &[u8]) -> Self {
        Self(form_urlencoded::parse(bytes).into_owned().collect())
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.trim())
            .filter(|value| !value.is_empty())
    }

    /// The fields named `<prefix><name>`, as `<name>`: the filter a bulk
    /// form carries beside its own fields.
    pub fn with_prefix(&self, prefix: &str) -> Self {
        Self(
            self.0
                .iter()
                .filter_map(|(key, value)| {
                    key.strip_prefix(prefix)
                        .map(|name| (name.to_owned(), value.clone()))
                })
                .collect(),
        )
    }

    pub fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}
