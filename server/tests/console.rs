//! The operator console over HTTP against the real server and PostgreSQL:
//! every refusal (no session, a wrong key, a reader acting, another
//! namespace, a missing, forged or cross-site CSRF token, a non-loopback
//! peer with no policy) changes nothing; an admin's action writes its audit
//! row under the signed-in principal; sign-out ends the session everywhere;
//! list pages stay stable while rows arrive; and a bulk job, run by two
//! replicas, aborted, resubmitted and resumed, acts exactly once on each
//! operation it counts. The browser suite (console/browser-test) drives the
//! same pages in Chromium.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::{TestApp, claim, claim_request, replica_of, spawn_app_with};
use opreg_client::proto as pb;
use opreg_server::config::Config;
use sha2::{Digest, Sha256};

const NAMESPACE: &str = "payments";

/// One HTTP/1.1 exchange: the status, the headers (names lowercased), the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The value of the first `name="field" value="..."` in the page.
    fn field(&self, field: &str) -> String {
        let marker = format!("name=\"{field}\" value=\"");
        let start = self
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("no {field} in {}", self.body))
            + marker.len();
        let end = self.body[start..].find('"').unwrap();
        self.body[start..start + end].to_owned()
    }
}

/// A browser without script: a cookie jar, GET and form POSTs.
#[derive(Default)]
struct Browser {
    cookies: HashMap<String, String>,
    /// Extra headers sent with every request (an Origin, say).
    extra: Vec<(String, String)>,
    /// The Host header; `localhost:<port>` unless set.
    host: Option<String>,
}

impl Browser {
    async fn send(
        &mut self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        form: &[(&str, &str)],
    ) -> Answer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = {
            let mut serializer = form_urlencoded::Serializer::new(String::new());
            for (name, value) in form {
                serializer.append_pair(name, value);
            }
            serializer.finish()
        };
        let host = self
            .host
            .clone()
            .unwrap_or_else(|| format!("localhost:{}", addr.port()));
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            request.push_str(&format!("Cookie: {}\r\n", jar.join("; ")));
        }
        for (name, value) in &self.extra {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if method == "POST" {
            request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("\r\n");
        if method == "POST" {
            request.push_str(&body);
        }
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8(response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        for (_, cookie) in headers.iter().filter(|(name, _)| name == "set-cookie") {
            let (pair, _) = cookie.split_once(';').unwrap_or((cookie, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Answer {
            status,
            headers,
            body: dechunk(body, head),
        }
    }

    /// An action on debit:7's page, with the fields given (an empty one is left out).
    async fn act(&mut self, addr: SocketAddr, action: &str, reason: &str, csrf: &str) -> Answer {
        let form: Vec<(&str, &str)> = [("action", action), ("reason", reason), ("csrf", csrf)]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        self.post(addr, HOLD_PATH, &form).await
    }

    async fn get(&mut self, addr: SocketAddr, path: &str) -> Answer {
        self.send(addr, "GET", path, &[]).await
    }

    async fn post(&mut self, addr: SocketAddr, path: &str, form: &[(&str, &str)]) -> Answer {
        self.send(addr, "POST", path, form).await
    }
}

/// The body of a chunked response, joined.
fn dechunk(body: &str, head: &str) -> String {
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_owned();
    }
    let mut rest = body;
    let mut joined = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        joined.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    joined
}

/// name, API key, namespaces, roles.
const PRINCIPALS: &[(&str, &str, &str, &str)] = &[
    ("ops-admin", "key-admin", r#"["payments"]"#, r#"["admin"]"#),
    (
        "ops-reader",
        "key-reader",
        r#"["payments"]"#,
        r#"["reader"]"#,
    ),
    (
        "billing-admin",
        "key-billing",
        r#"["billing"]"#,
        r#"["admin"]"#,
    ),
    ("seeder", "key-seeder", r#"["*"]"#, r#"["worker"]"#),
];

/// The policy file of one test, in a directory of its own removed with it.
struct PolicyDir(PathBuf);

impl PolicyDir {
    fn file(&self) -> PathBuf {
        self.0.join("policy.toml")
    }

    fn write(&self, principals: &[(&str, &str, &str, &str)]) {
        let text: String = principals
            .iter()
            .map(|(name, key, namespaces, roles)| {
                format!(
                    "[[principal]]\nname = \"{name}\"\napi_key_sha256 = \"{}\"\nnamespaces = {namespaces}\nroles = {roles}\n\n",
                    hex::encode(Sha256::digest(key))
                )
            })
            .collect();
        // Written aside and renamed, so the server never reads half a file.
        let aside = self.0.join("policy.toml.new");
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(aside, self.file()).unwrap();
    }
}

impl Drop for PolicyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn secured_app(test: &str, configure: impl FnOnce(&mut Config)) -> (TestApp, PolicyDir) {
    let dir = std::env::temp_dir().join(format!("opreg-console-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = PolicyDir(dir);
    policy.write(PRINCIPALS);
    let path = policy.file();
    let app = spawn_app_with(|config| {
        config.listeners.auth_file = Some(path);
        configure(config);
    })
    .await;
    (app, policy)
}

async fn seed_in_progress(
    app: &TestApp,
    keys: impl IntoIterator<Item = String>,
    api_key: Option<&str>,
) {
    let mut client = app.client.clone();
    for key in keys {
        let mut request = tonic::Request::new(claim_request(
            NAMESPACE,
            &key,
            "seeder",
            serde_json::json!({"key": key}),
        ));
        if let Some(api_key) = api_key {
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {api_key}").parse().unwrap(),
            );
        }
        let response = client.claim(request).await.unwrap().into_inner();
        assert_eq!(response.outcome(), pb::ClaimOutcome::Acquired);
    }
}

async fn audit_rows(app: &TestApp, key: &str) -> Vec<(String, String, String, String)> {
    sqlx::query_as("SELECT action, operator, principal, reason FROM audit_entries WHERE namespace = $1 AND operation_key = $2 ORDER BY id")
        .bind(NAMESPACE)
        .bind(key)
        .fetch_all(&app.db)
        .await
        .unwrap()
}

async fn sign_in(app: &TestApp, key: &str) -> (Browser, Answer) {
    let mut browser = Browser::default();
    let answer = browser
        .post(app.metrics_addr, "/console/sign-in", &[("api_key", key)])
        .await;
    (browser, answer)
}

const HOLD_PATH: &str = "/console/operations/payments/debit%3A7/act";

#[tokio::test]
async fn every_refusal_changes_nothing_and_an_admin_acts_as_the_signed_in_principal() {
    let (app, _policy) = secured_app("refusals", |_| {}).await;
    let addr = app.metrics_addr;
    seed_in_progress(&app, ["debit:7".to_owned()], Some("key-seeder")).await;

    // No session: pages send to the sign-in form, actions are refused.
    let mut stranger = Browser::default();
    let page = stranger.get(addr, "/console/").await;
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/console/sign-in"))
    );
    let acted = stranger.act(addr, "hold", "r", "x").await;
    assert_eq!(acted.status, 401);

    // A wrong key.
    let (_, wrong) = sign_in(&app, "key-nobody").await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.body.contains("That key is not known."),
        "{}",
        wrong.body
    );
    assert!(wrong.header("set-cookie").is_none());

    // A reader sees the operation and no action, and is refused the action.
    let (mut reader, signed) = sign_in(&app, "key-reader").await;
    assert_eq!(
        (signed.status, signed.header("location")),
        (303, Some("/console/"))
    );
    let cookie = signed.header("set-cookie").unwrap();
    for flag in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(flag), "{flag} missing from {cookie}");
    }
    let secret = reader.cookies["opreg_console_session"].clone();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM console_sessions WHERE secret_sha256 = sha256($1::text::bytea) AND principal = 'ops-reader'")
        .bind(&secret)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(
        stored, 1,
        "the database keeps the secret's digest, not the secret"
    );
    let operation = reader
        .get(addr, "/console/operations/payments/debit%3A7")
        .await;
    assert_eq!(operation.status, 200);
    assert!(operation.body.contains("debit:7"));
    assert!(
        !operation.body.contains("data-action"),
        "a reader is offered no action"
    );
    let confirm = reader.get(addr, &format!("{HOLD_PATH}?action=hold")).await;
    assert_eq!(confirm.status, 403);
    let overview = reader.get(addr, "/console/").await;
    let reader_csrf = overview.field("csrf");
    let refused = reader.act(addr, "hold", "r", &reader_csrf).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("role=\"alert\""));
    assert!(
        refused.body.contains("id=\"sign-out\""),
        "a refusal keeps the signed-in frame"
    );

    // An admin of another namespace reads nothing there.
    let (mut billing, _) = sign_in(&app, "key-billing").await;
    assert_eq!(
        billing
            .get(addr, "/console/operations/payments/debit%3A7")
            .await
            .status,
        403
    );
    assert_eq!(
        billing
            .get(addr, "/console/operations?namespace=payments")
            .await
            .status,
        403
    );

    // The admin: without a token, with a forged one, from another site.
    let (mut admin, _) = sign_in(&app, "key-admin").await;
    let confirm = admin.get(addr, &format!("{HOLD_PATH}?action=hold")).await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("What will change"));
    let admin_csrf = confirm.field("csrf");
    assert_eq!(admin.act(addr, "hold", "r", "").await.status, 403);
    assert_eq!(
        admin.act(addr, "hold", "r", &"0".repeat(64)).await.status,
        403
    );
    assert_eq!(
        admin.act(addr, "hold", "r", &reader_csrf).await.status,
        403,
        "a reader's token is not an admin's"
    );
    admin
        .extra
        .push(("Origin".into(), "http://evil.example".into()));
    assert_eq!(admin.act(addr, "hold", "r", &admin_csrf).await.status, 403);
    admin.extra.clear();
    // No reason: the RPC's own validation refuses it.
    assert_eq!(admin.act(addr, "hold", "", &admin_csrf).await.status, 400);
    assert!(
        audit_rows(&app, "debit:7").await.is_empty(),
        "no refusal wrote anything"
    );

    // Accepted: the operator is the principal, whatever the form says.
    let acted = admin
        .post(
            addr,
            HOLD_PATH,
            &[
                ("action", "hold"),
                ("reason", "checking the ledger"),
                ("csrf", &admin_csrf),
                ("operator", "someone-else"),
            ],
        )
        .await;
    assert_eq!(acted.status, 303, "{}", acted.body);
    assert_eq!(
        audit_rows(&app, "debit:7").await,
        vec![(
            "hold".into(),
            "ops-admin".into(),
            "ops-admin".into(),
            "checking the ledger".into()
        )]
    );
    let page = admin
        .get(
            addr,
            acted
                .header("location")
                .unwrap()
                .trim_start_matches(&format!("http://localhost:{}", addr.port())),
        )
        .await;
    assert!(
        page.body.contains("checking the ledger"),
        "the audit row shows at once"
    );
    // The same action again is refused by the operation's state: one audit row.
    assert_eq!(
        admin.act(addr, "hold", "again", &admin_csrf).await.status,
        409
    );
    assert_eq!(audit_rows(&app, "debit:7").await.len(), 1);
    // Two confirmation pages of one release: the second acts on what it no
    // longer shows, and says so.
    let first = admin
        .get(addr, &format!("{HOLD_PATH}?action=release"))
        .await;
    let second = admin
        .get(addr, &format!("{HOLD_PATH}?action=release"))
        .await;
    let confirmed = |page: &Answer| {
        ["seen_status", "seen_held", "seen_token"]
            .map(|field| (field, page.field(field)))
            .to_vec()
    };
    let release = |page: &Answer, reason: &'static str| {
        let mut form = confirmed(page);
        form.extend([
            ("action", "release".to_owned()),
            ("reason", reason.to_owned()),
            ("csrf", admin_csrf.clone()),
        ]);
        form
    };
    let form = release(&first, "found it");
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(admin.post(addr, HOLD_PATH, &pairs).await.status, 303);
    let form = release(&second, "found it too");
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let stale = admin.post(addr, HOLD_PATH, &pairs).await;
    assert_eq!(stale.status, 409);
    assert!(
        stale.body.contains("changed since you looked"),
        "{}",
        stale.body
    );
    assert_eq!(audit_rows(&app, "debit:7").await.len(), 2);

    // Sign-out ends the session in the database: the old cookie is worthless.
    let old = admin.cookies.clone();
    let out = admin
        .post(addr, "/console/sign-out", &[("csrf", &admin_csrf)])
        .await;
    assert_eq!(
        (out.status, out.header("location")),
        (303, Some("/console/sign-in"))
    );
    let mut replay = Browser {
        cookies: old,
        ..Browser::default()
    };
    assert_eq!(replay.get(addr, "/console/").await.status, 303);
    assert_eq!(
        replay.act(addr, "release", "r", &admin_csrf).await.status,
        401
    );
    let sessions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM console_sessions WHERE principal = 'ops-admin'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(sessions, 0);
}

/// A local address other than loopback, if the machine has one.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test]
async fn with_no_policy_only_loopback_peers_are_answered() {
    let app =
        spawn_app_with(|config| config.listeners.metrics_addr = "0.0.0.0:0".parse().unwrap()).await;
    let port = app.metrics_addr.port();
    let mut local = Browser::default();
    let page = local
        .get(SocketAddr::from(([127, 0, 0, 1], port)), "/console/")
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("loopback operator"));
    let ip = non_loopback_address().expect("this machine has a non-loopback address to test from");
    let mut remote = Browser::default();
    let refused = remote.get(SocketAddr::new(ip, port), "/console/").await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("loopback peers only"));
    // The probes and metrics beside it stay open.
    assert_eq!(
        remote.get(SocketAddr::new(ip, port), "/livez").await.status,
        200
    );
    // A page of another site whose name now points at 127.0.0.1 (DNS
    // rebinding) reaches a loopback peer, under its own name: refused.
    let mut rebound = Browser {
        host: Some(format!("evil.example:{port}")),
        ..Browser::default()
    };
    let refused = rebound
        .get(SocketAddr::from(([127, 0, 0, 1], port)), "/console/")
        .await;
    assert_eq!(refused.status, 403);
    for host in ["127.0.0.1", "[::1]", "LOCALHOST"] {
        let mut named = Browser {
            host: Some(format!("{host}:{port}")),
            ..Browser::default()
        };
        let page = named
            .get(SocketAddr::from(([127, 0, 0, 1], port)), "/console/")
            .await;
        assert_eq!(page.status, 200, "{host}");
    }
}

#[tokio::test]
async fn a_key_is_typed_only_over_https_or_on_localhost() {
    let (app, _policy) = secured_app("https", |_| {}).await;
    let mut plain = Browser {
        host: Some("opreg.example".into()),
        ..Browser::default()
    };
    let refused = plain
        .post(
            app.metrics_addr,
            "/console/sign-in",
            &[("api_key", "key-admin")],
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("HTTPS"));
    assert!(plain.cookies.is_empty());
    // Behind a proxy that terminated TLS.
    plain
        .extra
        .push(("X-Forwarded-Proto".into(), "https".into()));
    let signed = plain
        .post(
            app.metrics_addr,
            "/console/sign-in",
            &[("api_key", "key-admin")],
        )
        .await;
    assert_eq!(signed.status, 303, "{}", signed.body);
}

#[tokio::test]
async fn a_rotated_key_ends_its_sessions_and_a_job_stops_when_its_submitter_may_no_longer_act() {
    let (app, policy) = secured_app("rotation", |config| {
        config.console.console_bulk_rate = 2;
    })
    .await;
    let addr = app.metrics_addr;
    seed_in_progress(
        &app,
        (0..20).map(|n| format!("slow-{n:02}")),
        Some("key-seeder"),
    )
    .await;
    let (mut admin, _) = sign_in(&app, "key-admin").await;
    let list = admin
        .get(addr, "/console/operations?namespace=payments&prefix=slow-")
        .await;
    let (csrf, job_id) = (list.field("csrf"), list.field("job_id"));
    let submitted = admin
        .post(
            addr,
            "/console/jobs",
            &[
                ("csrf", csrf.as_str()),
                ("job_id", job_id.as_str()),
                ("filter_namespace", NAMESPACE),
                ("filter_prefix", "slow-"),
                ("action", "hold"),
                ("reason", "slowly"),
                ("scope", "filter"),
            ],
        )
        .await;
    assert_eq!(submitted.status, 303, "{}", submitted.body);
    wait_for_job(&app, &job_id, |(_, _, done, _)| *done >= 1).await;

    // The admin's key is rotated, and the principal is made a reader.
    let mut changed: Vec<(&str, &str, &str, &str)> = PRINCIPALS.to_vec();
    changed[0] = (
        "ops-admin",
        "key-admin-2",
        r#"["payments"]"#,
        r#"["reader"]"#,
    );
    policy.write(&changed);
    let (state, _, done, _) = wait_for_job(&app, &job_id, |(state, ..)| state == "aborted").await;
    assert_eq!(state, "aborted");
    assert!(done < 20, "stopped before the end: {done}");
    let why: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM console_jobs WHERE id = $1")
            .bind(&job_id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert!(
        why.as_deref().is_some_and(|why| why.contains("admin")),
        "{why:?}"
    );
    assert_eq!(
        job_actions(&app, &job_id).await.len(),
        usize::try_from(done).unwrap(),
        "nothing acted on after the stop"
    );
    // The session signed in with the old key is over.
    assert_eq!(admin.get(addr, "/console/").await.status, 303);
    let (_, with_new_key) = sign_in(&app, "key-admin-2").await;
    assert_eq!(with_new_key.status, 303);
}

/// Every key of the list, following the "Next page" links from `path`.
async fn walk_pages(
    browser: &mut Browser,
    addr: SocketAddr,
    path: &str,
    mut between: impl AsyncFnMut(),
) -> Vec<String> {
    let mut keys = Vec::new();
    let mut next = Some(path.to_owned());
    while let Some(path) = next.take() {
        let page = browser.get(addr, &path).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for piece in page.body.split("<tr data-key=\"").skip(1) {
            keys.push(piece[..piece.find('"').unwrap()].to_owned());
        }
        next = page
            .body
            .split("rel=\"next\" href=\"")
            .nth(1)
            .map(|rest| rest[..rest.find('"').unwrap()].replace("&amp;", "&"));
        between().await;
    }
    keys
}

#[tokio::test]
async fn pages_are_keyset_pages_that_stay_stable_while_rows_arrive() {
    let app = spawn_app_with(|_| {}).await;
    let addr = app.metrics_addr;
    seed_in_progress(&app, (0..23).map(|n| format!("page-{n:02}")), None).await;
    let mut browser = Browser::default();
    let mut arrivals = 0;
    let keys = walk_pages(
        &mut browser,
        addr,
        "/console/operations?namespace=payments&size=5&prefix=page-",
        async || {
            // Rows registered while the operator pages arrive after every cursor.
            seed_in_progress(&app, [format!("page-new-{arrivals}")], None).await;
            arrivals += 1;
        },
    )
    .await;
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "no key twice: {keys:?}");
    for n in 0..23 {
        assert!(
            keys.contains(&format!("page-{n:02}")),
            "page-{n:02} missing from {keys:?}"
        );
    }
    // Filters narrow: a prefix, an owner, a status by key.
    let only_new = walk_pages(
        &mut browser,
        addr,
        "/console/operations?namespace=payments&prefix=page-new-",
        async || {},
    )
    .await;
    assert!(!only_new.is_empty() && only_new.iter().all(|key| key.starts_with("page-new-")));
    let nobody = walk_pages(
        &mut browser,
        addr,
        "/console/operations?namespace=payments&owner=nobody",
        async || {},
    )
    .await;
    assert!(nobody.is_empty());
    let mut client = app.client.clone();
    let request = claim_request(NAMESPACE, "done-1", "w", serde_json::json!({}));
    let token = common::token(&claim(&mut client, request).await);
    client
        .complete(common::complete_request(
            NAMESPACE,
            "done-1",
            token,
            common::success(b"{\"ok\":true}"),
        ))
        .await
        .unwrap();
    let finished = walk_pages(
        &mut browser,
        addr,
        "/console/operations?namespace=payments&status=finished",
        async || {},
    )
    .await;
    assert_eq!(finished, vec!["done-1".to_owned()]);
    // A cursor the console did not give is refused, not guessed at.
    assert_eq!(
        browser
            .get(addr, "/console/operations?namespace=payments&after=zzz")
            .await
            .status,
        400
    );
    assert_eq!(
        browser
            .get(addr, "/console/operations?namespace=payments&status=nope")
            .await
            .status,
        400
    );
}

async fn job_row(app: &TestApp, id: &str) -> (String, i32, i32, i32) {
    sqlx::query_as("SELECT state, total, done, skipped FROM console_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

async fn wait_for_job(
    app: &TestApp,
    id: &str,
    until: impl Fn(&(String, i32, i32, i32)) -> bool,
) -> (String, i32, i32, i32) {
    for _ in 0..600 {
        let row = job_row(app, id).await;
        if until(&row) {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "job {id} never reached the wanted state: {:?}",
        job_row(app, id).await
    );
}

/// Audit rows each key got from the job.
async fn job_actions(app: &TestApp, id: &str) -> HashMap<String, i64> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT operation_key, count(*) FROM audit_entries WHERE reason LIKE '%(bulk job ' || $1 || ')' GROUP BY operation_key",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    rows.into_iter().collect()
}

#[tokio::test]
async fn a_bulk_job_acts_once_per_operation_across_replicas_aborted_resubmitted_and_resumed() {
    let rate = |config: &mut Config| config.console.console_bulk_rate = 20;
    let first = spawn_app_with(rate).await;
    let second = replica_of(&first, rate).await;
    const TOTAL: i32 = 40;
    seed_in_progress(&first, (0..TOTAL).map(|n| format!("bulk-{n:02}")), None).await;
    let mut browser = Browser::default();
    let list = browser
        .get(
            first.metrics_addr,
            "/console/operations?namespace=payments&prefix=bulk-",
        )
        .await;
    let (csrf, job_id) = (list.field("csrf"), list.field("job_id"));
    let form = [
        ("csrf", csrf.as_str()),
        ("job_id", job_id.as_str()),
        ("filter_namespace", NAMESPACE),
        ("filter_status", "unfinished"),
        ("filter_prefix", "bulk-"),
        ("action", "hold"),
        ("reason", "incident 42"),
        ("scope", "filter"),
    ];
    let submitted = browser
        .post(first.metrics_addr, "/console/jobs", &form)
        .await;
    assert_eq!(submitted.status, 303, "{}", submitted.body);
    let job_path = format!("/console/jobs/{job_id}");
    assert!(submitted.header("location").unwrap().ends_with(&job_path));

    // Abort it partway, through the other replica.
    wait_for_job(&first, &job_id, |(_, _, done, _)| *done >= 5).await;
    let aborted = browser
        .post(
            second.metrics_addr,
            &format!("{job_path}/abort"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(aborted.status, 303);
    let (state, total, done, skipped) = job_row(&first, &job_id).await;
    assert_eq!((state.as_str(), total), ("aborted", TOTAL));
    assert!(done < TOTAL, "aborted before the end: {done}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job_row(&first, &job_id).await,
        (state, total, done, skipped),
        "an aborted job stands still"
    );
    let acted = job_actions(&first, &job_id).await;
    assert_eq!(
        i32::try_from(acted.len()).unwrap(),
        done,
        "the count is exactly what was done"
    );
    assert!(acted.values().all(|&rows| rows == 1));

    // A resubmission after a "timeout" lands on the same job and starts nothing.
    let again = browser
        .post(second.metrics_addr, "/console/jobs", &form)
        .await;
    assert!(again.header("location").unwrap().ends_with(&job_path));
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM console_jobs")
        .fetch_one(&first.db)
        .await
        .unwrap();
    assert_eq!(jobs, 1);

    // Meanwhile an operator holds three operations the job has not reached.
    let mut untouched: Vec<String> = (0..TOTAL)
        .map(|n| format!("bulk-{n:02}"))
        .filter(|key| !acted.contains_key(key))
        .collect();
    untouched.truncate(3);
    let mut admin = first.admin.clone();
    for key in &untouched {
        admin
            .hold_operation(pb::HoldOperationRequest {
                namespace: NAMESPACE.into(),
                operation_key: key.clone(),
                operator: "oncall".into(),
                reason: "by hand".into(),
            })
            .await
            .unwrap();
    }

    // Resumed: both replicas' runners compete for it; it finishes once.
    let page = browser.get(second.metrics_addr, &job_path).await;
    assert!(page.body.contains("id=\"resume\""), "{}", page.body);
    let resumed = browser
        .post(
            second.metrics_addr,
            &format!("{job_path}/resume"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(resumed.status, 303);
    let (state, total, done, skipped) =
        wait_for_job(&first, &job_id, |(state, ..)| state == "finished").await;
    assert_eq!((total, done, skipped), (TOTAL, TOTAL - 3, 3), "{state}");
    let acted = job_actions(&first, &job_id).await;
    assert_eq!(i32::try_from(acted.len()).unwrap(), TOTAL - 3);
    assert!(
        acted.values().all(|&rows| rows == 1),
        "no operation acted on twice: {acted:?}"
    );
    assert!(untouched.iter().all(|key| !acted.contains_key(key)));
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM operations WHERE namespace = $1 AND held_at IS NOT NULL",
    )
    .bind(NAMESPACE)
    .fetch_one(&first.db)
    .await
    .unwrap();
    assert_eq!(held, i64::from(TOTAL));
    let page = browser.get(first.metrics_addr, &job_path).await;
    assert!(page.body.contains("id=\"job-status\">finished"));
    assert!(
        page.body.contains(&format!(
            "{TOTAL} of {TOTAL} processed: {} acted on, 3 skipped",
            TOTAL - 3
        )),
        "{}",
        page.body
    );
}
