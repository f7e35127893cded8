//! Who is looking at the console. With a policy, an operator signs in with
//! an API key of the policy; the browser then holds a random session secret
//! in a `Secure`, `HttpOnly`, `SameSite=Strict` cookie, and the database holds
//! its SHA-256 ([`crate::store::console_sessions`]). Each request maps the
//! session to the principal of the *current* policy, so a principal removed
//! on reload is signed out and one whose roles changed acts with the new ones.
//! With no policy the console answers loopback peers only, as the gRPC
//! listener may run without a policy only on loopback.
//!
//! Every state-changing request carries a CSRF token derived from the
//! cookie's secret (which a page of another site can neither read nor
//! guess), and must come from this origin when the browser says where it
//! comes from.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use sha2::{Digest, Sha256};

use super::html::{Section, alert, page};
use super::{Console, ConsoleError, Fields};
use crate::access::{Caller, Credentials, Role};
use crate::store::console_sessions::SessionRow;
use crate::telemetry::metrics;

/// The session cookie, with a policy.
const SESSION_COOKIE: &str = "opreg_console_session";
/// Without a policy: a random secret only for the CSRF token.
const ANONYMOUS_COOKIE: &str = "opreg_console_csrf";

/// The operator's name when there is no policy to name one.
pub const LOOPBACK_OPERATOR: &str = "loopback operator";

/// The viewer of one request.
#[derive(Clone, Debug)]
pub struct Viewer {
    caller: Caller,
    /// The cookie's secret: the session's, or the anonymous one.
    secret: String,
    /// A new anonymous cookie to set with the response.
    new_cookie: Option<String>,
}

impl Viewer {
    pub fn signed_in(&self) -> bool {
        matches!(self.caller, Caller::Principal(_))
    }

    /// The name shown and recorded as the operator of an action.
    pub fn display_name(&self) -> &str {
        match self.caller {
            Caller::Unrestricted => LOOPBACK_OPERATOR,
            Caller::Principal(_) => self.caller.name(),
        }
    }

    /// The authenticated principal as the audit trail records it; empty with no policy.
    pub fn principal(&self) -> &str {
        self.caller.name()
    }

    pub fn role_text(&self) -> String {
        match self.caller {
            Caller::Unrestricted => "no policy: loopback only".to_owned(),
            Caller::Principal(_) => self.caller.roles().join(", "),
        }
    }

    /// The token every form of this viewer carries.
    pub fn csrf(&self) -> String {
        csrf_for(&self.secret)
    }

    pub fn may(&self, role: Role, namespace: &str) -> bool {
        self.caller.authorize(role, namespace).is_ok()
    }

    pub fn authorize(&self, role: Role, namespace: &str) -> Result<(), ConsoleError> {
        self.caller.authorize(role, namespace).map_err(|refusal| {
            metrics::auth_refused("permission_denied");
            ConsoleError::Registry(refusal)
        })
    }

    /// Adds the anonymous cookie this request was given, if any.
    pub fn finish(&self, mut response: Response) -> Response {
        if let Some(secret) = &self.new_cookie
            && let Ok(value) = cookie(ANONYMOUS_COOKIE, secret, None).parse()
        {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        response
    }
}

fn csrf_for(secret: &str) -> String {
    hex::encode(Sha256::digest(format!("opreg console csrf:{secret}")))
}

fn secret_sha256(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

fn new_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// A cookie the browser sends back to /console only, over HTTPS (or to
/// localhost), never to script, and never with a request another site starts.
fn cookie(name: &str, value: &str, max_age: Option<u64>) -> String {
    let lifetime = max_age.map_or(String::new(), |seconds| format!("; Max-Age={seconds}"));
    format!("{name}={value}; Path=/console; Secure; HttpOnly; SameSite=Strict{lifetime}")
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|value| value.len() == 64 && value.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

/// The viewer of a request, or why there is none. `posting` decides how a
/// missing sign-in is answered: a page is sent to the sign-in form, a
/// state-changing request is refused.
pub async fn identify(
    console: &Console,
    headers: &HeaderMap,
    peer: SocketAddr,
    posting: bool,
) -> Result<Viewer, ConsoleError> {
    if !console.access.is_restricted() {
        // The Host too: a page of another site whose name was re-pointed at
        // 127.0.0.1 (DNS rebinding) reaches a loopback peer under its own name.
        if !peer.ip().to_canonical().is_loopback() || !loopback_host(headers) {
            metrics::auth_refused("console_not_loopback");
            return Err(ConsoleError::Forbidden(
                "With no policy (OPREG_AUTH_FILE) the console answers loopback peers only, \
                 addressed as localhost, 127.0.0.1 or [::1]."
                    .into(),
            ));
        }
        let (secret, new_cookie) = match cookie_value(headers, ANONYMOUS_COOKIE) {
            Some(secret) => (secret.to_owned(), None),
            None => {
                let secret = new_secret();
                (secret.clone(), Some(secret))
            }
        };
        return Ok(Viewer {
            caller: Caller::Unrestricted,
            secret,
            new_cookie,
        });
    }
    let not_signed_in = || {
        if posting {
            ConsoleError::Unauthenticated
        } else {
            ConsoleError::SignInNeeded
        }
    };
    let secret = cookie_value(headers, SESSION_COOKIE).ok_or_else(not_signed_in)?;
    let session = console
        .registry
        .console_session(&secret_sha256(secret))
        .await?
        .ok_or_else(not_signed_in)?;
    // The principal as the policy has it now: gone, or its key rotated, and
    // the session is over.
    let caller = console
        .access
        .principal_named(&session.principal)
        .filter(|caller| {
            caller
                .key_sha256()
                .is_some_and(|key| key[..] == session.key_sha256[..])
        })
        .ok_or_else(not_signed_in)?;
    Ok(Viewer {
        caller,
        secret: secret.to_owned(),
        new_cookie: None,
    })
}

/// The viewer of a page (a GET): without a session, the answer is the
/// sign-in form.
pub struct Reading(pub Viewer);

impl FromRequestParts<Console> for Reading {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Console,
    ) -> Result<Self, ConsoleError> {
        let peer = peer_of(parts)?;
        identify(console, &parts.headers, peer, false)
            .await
            .map(Reading)
    }
}

/// A state-changing request (a POST) and its form, from a viewer with a
/// session and the token of a page this console gave it: every check a
/// change needs, in one place, before any handler runs.
pub struct Acting(pub Viewer, pub Fields);

/// The largest form the console accepts (a selection of 1,000 keys fits).
const FORM_LIMIT: usize = 1 << 20;

impl FromRequest<Console> for Acting {
    type Rejection = ConsoleError;

    async fn from_request(request: Request, console: &Console) -> Result<Self, ConsoleError> {
        let (mut parts, body) = request.into_parts();
        let peer = peer_of(&mut parts)?;
        let viewer = identify(console, &parts.headers, peer, true).await?;
        let body = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| {
            ConsoleError::BadInput("The form is larger than the console accepts.".into())
        })?;
        let fields = Fields::parse(&body);
        check_request(&viewer, &parts.headers, &fields)?;
        Ok(Acting(viewer, fields))
    }
}

/// The peer's address, which the HTTP server records on every connection.
fn peer_of(parts: &mut Parts) -> Result<SocketAddr, ConsoleError> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer)
        .ok_or_else(|| ConsoleError::Forbidden("The peer's address is unknown.".into()))
}

/// Refuses a state-changing request that carries no valid token for this
/// viewer, or that the browser says comes from another origin.
fn check_request(
    viewer: &Viewer,
    headers: &HeaderMap,
    fields: &Fields,
) -> Result<(), ConsoleError> {
    same_origin(headers)?;
    let given = fields.get("csrf").unwrap_or_default();
    let expected = viewer.csrf();
    // Compared in constant time: the token is a secret.
    let matches = given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0;
    if matches {
        Ok(())
    } else {
        metrics::auth_refused("console_csrf");
        Err(ConsoleError::Forbidden(
            "This form is stale or did not come from the console: reload the page and try again."
                .into(),
        ))
    }
}

/// The host name of the request's `Host` header, without its port.
fn host_name(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    Some(match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    })
}

/// Whether the request names this machine's loopback interface.
fn loopback_host(headers: &HeaderMap) -> bool {
    host_name(headers).is_some_and(|name| {
        name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.to_canonical().is_loopback())
    })
}

/// Whether the browser reached the console over HTTPS, as it (or the proxy
/// that terminated TLS) reports it.
fn over_https(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    text("origin").is_some_and(|origin| origin.starts_with("https://"))
        || text("x-forwarded-proto").is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// A request another site's page started, as the browser reports it.
fn same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    let cross_site = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| site != "same-origin" && site != "none");
    let foreign_origin = match (text(header::ORIGIN), text(header::HOST)) {
        (Some(origin), Some(host)) => {
            origin != format!("http://{host}") && origin != format!("https://{host}")
        }
        (Some(_), None) => true,
        (None, _) => false,
    };
    if cross_site || foreign_origin {
        metrics::auth_refused("console_cross_origin");
        return Err(ConsoleError::Forbidden(
            "Requests from other sites are refused.".into(),
        ));
    }
    Ok(())
}

pub async fn sign_in_page(State(console): State<Console>) -> Response {
    if !console.access.is_restricted() {
        return Redirect::to("/console/").into_response();
    }
    sign_in_form(StatusCode::OK, None)
}

fn sign_in_form(status: StatusCode, problem: Option<&str>) -> Response {
    let body = page(
        None,
        Section::SignIn,
        "Sign in",
        html! {
            h1 { "Sign in" }
            @if let Some(problem) = problem { (alert(problem)) }
            form #sign-in method="post" action="/console/sign-in" {
                label for="api-key" { "API key" }
                input #api-key type="password" name="api_key" autocomplete="current-password" required autofocus;
                p.hint { "A key of the server's policy (OPREG_AUTH_FILE). Readers see; admins act." }
                button type="submit" { "Sign in" }
            }
        },
    );
    (status, body).into_response()
}

pub async fn sign_in(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    if !console.access.is_restricted() {
        return Ok(Redirect::to("/console/").into_response());
    }
    same_origin(&headers)?;
    // A key typed into a page served in the clear travels in the clear, and
    // the Secure cookie would not come back: refuse rather than half-work.
    if !over_https(&headers) && !loopback_host(&headers) {
        metrics::auth_refused("console_plain_http");
        return Err(ConsoleError::Forbidden(
            "Sign in over HTTPS (a proxy that terminates TLS in front of this port), or on \
             localhost: an API key must not travel in the clear."
                .into(),
        ));
    }
    let fields = Fields::parse(&body);
    let key = fields.get("api_key").unwrap_or_default().trim();
    let authorization = format!("Bearer {key}");
    let caller = console.access.authenticate(Credentials {
        authorization: Some(authorization.as_bytes()),
        tls_identities: &[],
    });
    let Some((caller, key_sha256)) = caller
        .ok()
        .and_then(|caller| caller.key_sha256().map(|key| (caller, key)))
    else {
        metrics::auth_refused("unauthenticated");
        return Ok(sign_in_form(
            StatusCode::UNAUTHORIZED,
            Some("That key is not known."),
        ));
    };
    // A session this browser already had ends: a sign-in always starts anew.
    if let Some(old) = cookie_value(&headers, SESSION_COOKIE) {
        console
            .registry
            .close_console_session(&secret_sha256(old))
            .await?;
    }
    let secret = new_secret();
    let ttl = console.settings.session_ttl;
    let session = SessionRow {
        principal: caller.name().to_owned(),
        key_sha256: key_sha256.to_vec(),
    };
    console
        .registry
        .open_console_session(&secret_sha256(&secret), &session, ttl)
        .await?;
    tracing::info!(principal = caller.name(), "console sign-in");
    let mut response = Redirect::to("/console/").into_response();
    if let Ok(value) = cookie(SESSION_COOKIE, &secret, Some(ttl.as_secs())).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

pub async fn sign_out(
    State(console): State<Console>,
    Acting(viewer, _): Acting,
) -> Result<Response, ConsoleError> {
    if viewer.signed_in() {
        console
            .registry
            .close_console_session(&secret_sha256(&viewer.secret))
            .await?;
    }
    let mut response = Redirect::to("/console/sign-in").into_response();
    if let Ok(value) = cookie(SESSION_COOKIE, "", Some(0)).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}
