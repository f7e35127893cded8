//! The access policy through the real server and the generated stubs: every
//! RPC of both services, called by each role and by a principal of another
//! namespace, is allowed or refused with the documented code, reason and
//! metadata; refused calls change nothing; the file is re-read on SIGHUP and
//! when it changes, and a bad file keeps the policy in force.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TestApp, claim_request, spawn_app_with};
use opreg_client::proto::operation_admin_client::OperationAdminClient;
use opreg_client::proto::operation_registry_client::OperationRegistryClient;
use opreg_client::{Client, ConnectOptions, Transport, error_info, proto as pb};
use opreg_server::access::RPC_ROLES;
use prost::Message;
use sha2::{Digest, Sha256};
use tonic::{Code, Status};

const NAMESPACE: &str = "payments";

/// name, API key, namespaces, roles.
const PRINCIPALS: &[(&str, &str, &str, &str)] = &[
    (
        "payments-reader",
        "key-reader",
        r#"["payments"]"#,
        r#"["reader"]"#,
    ),
    (
        "payments-worker",
        "key-worker",
        r#"["payments", "tenant-*"]"#,
        r#"["worker"]"#,
    ),
    ("payments-admin", "key-admin", r#"["pay*"]"#, r#"["admin"]"#),
    (
        "intruder",
        "key-intruder",
        r#"["billing", "tenant-*"]"#,
        r#"["reader", "worker", "admin"]"#,
    ),
];

fn policy_text(principals: &[(&str, &str, &str, &str)]) -> String {
    principals
        .iter()
        .map(|(name, key, namespaces, roles)| {
            format!(
                "[[principal]]\nname = \"{name}\"\napi_key_sha256 = \"{}\"\nnamespaces = {namespaces}\nroles = {roles}\n\n",
                hex::encode(Sha256::digest(key))
            )
        })
        .collect()
}

/// A policy file in a directory of its own, removed with it.
struct PolicyFile(PathBuf);

impl AsRef<Path> for PolicyFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for PolicyFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn policy_file(test: &str, text: &str) -> PolicyFile {
    let dir = std::env::temp_dir().join(format!("opreg-access-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("policy.toml");
    std::fs::write(&path, text).unwrap();
    PolicyFile(path)
}

async fn secured_app(test: &str) -> (TestApp, PolicyFile) {
    let policy = policy_file(test, &policy_text(PRINCIPALS));
    let path = policy.0.clone();
    let app = spawn_app_with(|config| config.listeners.auth_file = Some(path.clone())).await;
    (app, policy)
}

async fn client_with_key(app: &TestApp, key: Option<&str>) -> Client {
    let mut options = ConnectOptions::default();
    if let Some(key) = key {
        options = options.api_key(key).unwrap();
    }
    Client::connect_with(app.endpoint.clone(), &options)
        .await
        .unwrap()
}

/// Both generated stubs over one client's channel and credentials.
#[derive(Clone)]
struct Stubs {
    registry: OperationRegistryClient<Transport>,
    admin: OperationAdminClient<Transport>,
}

impl Stubs {
    fn of(client: &Client) -> Self {
        Self {
            registry: client.clone().into_inner(),
            admin: OperationAdminClient::new(client.transport()),
        }
    }
}

/// Every RPC of both services (`Service/Method`), with the role it needs: the
/// server's own table, which the walk below checks against the contract.
fn rpcs() -> impl Iterator<Item = (&'static str, &'static str)> {
    RPC_ROLES.iter().map(|&(path, role)| {
        let rpc = path.strip_prefix("/opreg.v1.").expect("an opreg.v1 path");
        (rpc, role.as_str())
    })
}

/// A batch item's status as the status of a call, details and all.
fn item_status(status: tonic_types::pb::Status) -> Status {
    Status::with_details(
        Code::from(status.code),
        status.message.clone(),
        status.encode_to_vec().into(),
    )
}

/// One call of `rpc` in `namespace`, with a request the server can act on.
async fn call(stubs: &Stubs, rpc: &str, namespace: &str) -> Result<(), Status> {
    let Stubs {
        mut registry,
        mut admin,
    } = stubs.clone();
    let ns = namespace.to_owned();
    let key = "walk-key".to_owned();
    // An OperationAdmin action on the walk's key, stated by an operator.
    macro_rules! admin_action {
        ($method:ident, $request:ident { $($rest:tt)* }) => {
            admin
                .$method(pb::$request {
                    namespace: ns,
                    operation_key: key,
                    operator: "walker".into(),
                    reason: "access walk".into(),
                    $($rest)*
                })
                .await
                .map(drop)
        };
    }
    match rpc {
        "OperationRegistry/Claim" => {
            let request = claim_request(
                namespace,
                "walk-claim",
                "walker",
                serde_json::json!({"a": 1}),
            );
            registry.claim(request).await.map(drop)
        }
        "OperationRegistry/Complete" => registry
            .complete(common::complete_request(
                namespace,
                &key,
                1,
                common::success(b"r"),
            ))
            .await
            .map(drop),
        "OperationRegistry/Lookup" => registry
            .lookup(pb::LookupRequest {
                namespace: ns,
                operation_key: key,
                ..Default::default()
            })
            .await
            .map(drop),
        "OperationRegistry/Renew" => registry
            .renew(common::renew_request(namespace, &key, "walker", 1))
            .await
            .map(drop),
        "OperationRegistry/FencedWrite" => registry
            .fenced_write(common::write_request(namespace, &key, 1, b"v"))
            .await
            .map(drop),
        "OperationRegistry/GetResource" => registry
            .get_resource(pb::GetResourceRequest {
                namespace: ns,
                resource: "account:1".into(),
            })
            .await
            .map(drop),
        "OperationRegistry/ClaimDue" => registry
            .claim_due(pb::ClaimDueRequest {
                namespace: ns,
                owner: "walker".into(),
                limit: 1,
                ..Default::default()
            })
            .await
            .map(drop),
        // A batch of one: its item's refusal is the call's, for the walk.
        "OperationRegistry/BatchClaim" => {
            let claims = vec![claim_request(
                namespace,
                "walk-claim",
                "walker",
                serde_json::json!({"a": 1}),
            )];
            let mut results = registry
                .batch_claim(pb::BatchClaimRequest { claims })
                .await?
                .into_inner()
                .results;
            match results.pop().and_then(|item| item.result) {
                Some(pb::batch_claim_result::Result::Error(status)) => Err(item_status(status)),
                _ => Ok(()),
            }
        }
        "OperationRegistry/BatchComplete" => {
            let completions = vec![common::complete_request(
                namespace,
                &key,
                1,
                common::success(b"r"),
            )];
            let mut results = registry
                .batch_complete(pb::BatchCompleteRequest { completions })
                .await?
                .into_inner()
                .results;
            match results.pop().and_then(|item| item.result) {
                Some(pb::batch_complete_result::Result::Error(status)) => Err(item_status(status)),
                _ => Ok(()),
            }
        }
        "OperationAdmin/ListOperations" => admin
            .list_operations(pb::ListOperationsRequest {
                namespace: ns,
                ..Default::default()
            })
            .await
            .map(drop),
        "OperationAdmin/ResolveOperation" => admin_action!(
            resolve_operation,
            ResolveOperationRequest {
                outcome: Some(pb::resolve_operation_request::Outcome::Success(
                    pb::Success::default()
                )),
            }
        ),
        "OperationAdmin/RequeueOperation" => admin_action!(
            requeue_operation,
            RequeueOperationRequest {
                ..Default::default()
            }
        ),
        "OperationAdmin/HoldOperation" => admin_action!(hold_operation, HoldOperationRequest {}),
        "OperationAdmin/ReleaseOperation" => {
            admin_action!(release_operation, ReleaseOperationRequest {})
        }
        other => panic!("the walk has no call for {other}"),
    }
}

fn grants(principal_roles: &str, needed: &str) -> bool {
    principal_roles.contains(&format!("\"{needed}\""))
        || (needed == "reader"
            && (principal_roles.contains("\"worker\"") || principal_roles.contains("\"admin\"")))
}

fn assert_refused(answer: &Result<(), Status>, code: Code, reason: &str, context: &str) {
    let Err(status) = answer else {
        panic!("{context}: allowed, expected {code:?}");
    };
    assert_eq!(status.code(), code, "{context}: {status:?}");
    let info = error_info(status).unwrap_or_else(|| panic!("{context}: no ErrorInfo"));
    assert_eq!(info.reason, reason, "{context}");
}

fn is_access_refusal(answer: &Result<(), Status>) -> bool {
    matches!(answer, Err(status) if matches!(status.code(), Code::PermissionDenied | Code::Unauthenticated))
}

#[test]
fn the_walk_covers_every_rpc_of_both_services() {
    let set = prost_types::FileDescriptorSet::decode(opreg_proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut methods: Vec<String> = set
        .file
        .iter()
        .filter(|file| file.package() == "opreg.v1")
        .flat_map(|file| &file.service)
        .flat_map(|service| {
            service
                .method
                .iter()
                .map(move |method| format!("{}/{}", service.name(), method.name()))
        })
        .collect();
    methods.sort();
    let mut walked: Vec<String> = rpcs().map(|(rpc, _)| rpc.to_owned()).collect();
    walked.sort();
    assert_eq!(walked, methods, "a new RPC needs its entry in RPC_ROLES");
}

/// The rule that the role table writes out, stated apart from it so that a
/// weakened entry fails here: reads need a reader, the operator's actions an
/// admin, and every other call a worker.
#[test]
fn the_role_table_follows_the_rule() {
    for (rpc, needed) in rpcs() {
        let (service, method) = rpc.split_once('/').unwrap();
        let rule = if method == "Lookup" || method.starts_with("Get") || method.starts_with("List")
        {
            "reader"
        } else if service == "OperationAdmin" {
            "admin"
        } else {
            "worker"
        };
        assert_eq!(needed, rule, "{rpc}");
    }
}

#[tokio::test]
async fn each_role_is_allowed_exactly_its_rpcs_and_no_other_namespace() {
    let (app, _policy) = secured_app("walk").await;
    let before = app.row_counts().await;
    for &(name, key, _, roles) in PRINCIPALS {
        let stubs = Stubs::of(&client_with_key(&app, Some(key)).await);
        for (rpc, needed) in rpcs() {
            let answer = call(&stubs, rpc, NAMESPACE).await;
            let context = format!("{name} calling {rpc} in {NAMESPACE}");
            if name != "intruder" && grants(roles, needed) {
                assert!(!is_access_refusal(&answer), "{context}: refused {answer:?}");
                continue;
            }
            assert_refused(
                &answer,
                Code::PermissionDenied,
                "PERMISSION_DENIED",
                &context,
            );
            let info = error_info(answer.as_ref().unwrap_err()).unwrap();
            assert_eq!(info.metadata["principal"], name, "{context}");
            assert_eq!(info.metadata["namespace"], NAMESPACE, "{context}");
            assert_eq!(info.metadata["role"], needed, "{context}");
        }
    }
    // Only the worker's own claim wrote anything.
    let after = app.row_counts().await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2),
        (1, 1, before.2)
    );
}

#[tokio::test]
async fn without_credentials_or_with_a_wrong_key_every_rpc_is_unauthenticated() {
    let (app, _policy) = secured_app("anonymous").await;
    for key in [None, Some("not-a-key")] {
        let stubs = Stubs::of(&client_with_key(&app, key).await);
        for (rpc, _) in rpcs() {
            let answer = call(&stubs, rpc, NAMESPACE).await;
            assert_refused(
                &answer,
                Code::Unauthenticated,
                "UNAUTHENTICATED",
                &format!("{key:?} {rpc}"),
            );
        }
    }
    assert_eq!(app.row_counts().await, (0, 0, 0));
    // Health stays open.
    assert!(app.health("").await.is_some());
}

/// A batch is authorized item by item, each for its own namespace: the
/// worker's items in its namespaces are claimed, the others refused in their
/// slots, in any order, and the refused ones write nothing.
#[tokio::test]
async fn a_batch_across_namespaces_authorizes_each_item_for_its_own() {
    let (app, _policy) = secured_app("batch").await;
    let mut worker = Stubs::of(&client_with_key(&app, Some("key-worker")).await).registry;
    let items = [
        ("billing", "k-0"),
        (NAMESPACE, "k-1"),
        ("billing", "k-2"),
        ("tenant-7", "k-3"),
        (NAMESPACE, "k-4"),
    ];
    let claims = items
        .iter()
        .map(|(namespace, key)| {
            claim_request(namespace, key, "worker-1", serde_json::json!({"amount": 1}))
        })
        .collect();
    let results = worker
        .batch_claim(pb::BatchClaimRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .results;
    let answers: Vec<Result<(), Status>> = results
        .into_iter()
        .map(|result| match result.result {
            Some(pb::batch_claim_result::Result::Claim(_)) => Ok(()),
            Some(pb::batch_claim_result::Result::Error(status)) => Err(item_status(status)),
            None => panic!("an empty slot"),
        })
        .collect();
    for (answer, (namespace, key)) in answers.iter().zip(items) {
        if namespace == "billing" {
            assert_refused(answer, Code::PermissionDenied, "PERMISSION_DENIED", key);
        } else {
            assert!(answer.is_ok(), "{key}: {answer:?}");
        }
    }
    let registered: Vec<String> =
        sqlx::query_scalar("SELECT namespace || '/' || operation_key FROM operations ORDER BY 1")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(registered, ["payments/k-1", "payments/k-4", "tenant-7/k-3"]);
}

#[tokio::test]
async fn a_principal_of_another_namespace_cannot_complete_renew_or_fence_a_live_lease() {
    let (app, _policy) = secured_app("forgery").await;
    let worker = client_with_key(&app, Some("key-worker")).await;
    let claimed = worker
        .claim(claim_request(
            NAMESPACE,
            "debit-1",
            "worker-1",
            serde_json::json!({"amount": 5}),
        ))
        .await
        .unwrap();
    let token = claimed.lease.unwrap().fencing_token;
    let intruder = Stubs::of(&client_with_key(&app, Some("key-intruder")).await);
    let mut registry = intruder.registry.clone();
    let forged = [
        registry
            .complete(common::complete_request(
                NAMESPACE,
                "debit-1",
                token,
                common::success(b"forged"),
            ))
            .await
            .map(drop),
        registry
            .renew(common::renew_request(
                NAMESPACE, "debit-1", "worker-1", token,
            ))
            .await
            .map(drop),
        registry
            .fenced_write(common::write_request(NAMESPACE, "debit-1", token, b"0"))
            .await
            .map(drop),
    ];
    for answer in &forged {
        assert_refused(
            answer,
            Code::PermissionDenied,
            "PERMISSION_DENIED",
            "forged call",
        );
    }
    let (status, result): (String, Option<Vec<u8>>) = sqlx::query_as(
        "SELECT status::text, result FROM operations WHERE operation_key = 'debit-1'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!((status.as_str(), result), ("in_progress", None));
    assert_eq!(app.count("SELECT count(*) FROM resources").await, 0);
}

#[tokio::test]
async fn admin_actions_record_the_principal_beside_the_stated_operator() {
    let (app, _policy) = secured_app("audit").await;
    let worker = client_with_key(&app, Some("key-worker")).await;
    worker
        .claim(claim_request(
            NAMESPACE,
            "payout-1",
            "worker-1",
            serde_json::json!({}),
        ))
        .await
        .unwrap();
    let admin = client_with_key(&app, Some("key-admin")).await.admin();
    let held = admin
        .hold(pb::HoldOperationRequest {
            namespace: NAMESPACE.into(),
            operation_key: "payout-1".into(),
            operator: "alice".into(),
            reason: "suspected double payout".into(),
        })
        .await
        .unwrap();
    let audit = held.audit.unwrap();
    assert_eq!(
        (audit.operator.as_str(), audit.principal.as_str()),
        ("alice", "payments-admin")
    );
    let stored: String = sqlx::query_scalar("SELECT principal FROM audit_entries")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(stored, "payments-admin");
}

/// Polls until `key` is or is not accepted for a Lookup, or gives up.
async fn wait_until_accepted(app: &TestApp, key: &str, accepted: bool) -> bool {
    let client = client_with_key(app, Some(key)).await;
    for _ in 0..50 {
        let answer = client
            .lookup(pb::LookupRequest {
                namespace: NAMESPACE.into(),
                operation_key: "anything".into(),
                ..Default::default()
            })
            .await;
        let refused = matches!(answer, Err(opreg_client::Error::Unauthenticated { .. }));
        if refused != accepted {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

fn send_hangup() {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[tokio::test]
async fn the_policy_is_reloaded_on_change_and_on_sighup_and_a_bad_file_keeps_it() {
    let (app, path) = secured_app("reload").await;
    assert!(wait_until_accepted(&app, "key-reader", true).await);

    // The reader alone, with another key.
    let reader_with =
        |key| policy_text(&[("payments-reader", key, r#"["payments"]"#, r#"["reader"]"#)]);

    // A changed file is picked up without a signal.
    std::fs::write(&path, reader_with("key-rotated")).unwrap();
    assert!(
        wait_until_accepted(&app, "key-rotated", true).await,
        "change not picked up"
    );
    assert!(wait_until_accepted(&app, "key-reader", false).await);

    // Same length, same modification time: only SIGHUP can reveal it.
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, reader_with("key-rotat3d")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    send_hangup();
    assert!(
        wait_until_accepted(&app, "key-rotat3d", true).await,
        "SIGHUP did not reload"
    );

    // A file that does not check keeps the policy in force.
    std::fs::write(&path, "[[principal]]\nname = \"broken\"\n").unwrap();
    send_hangup();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(wait_until_accepted(&app, "key-rotat3d", true).await);
    let scraped = common::scrape(app.metrics_addr).await;
    let failed = [("file", "policy"), ("result", "error")];
    assert!(scraped.value("opreg_config_reloads_total", &failed) >= 1.0);
}
