//! TLS and mutual TLS through the generated clients, with certificates signed
//! in the test: a client that trusts the CA is served, a plaintext client is
//! not; under mutual TLS a client without a certificate, or with one from
//! another CA, cannot connect, and a certificate's identity names its
//! principal; new certificate files are served without a restart.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::pki::{Pki, write};
use common::{TestApp, claim_request, spawn_app_with};
use opreg_client::{Client, ConnectOptions, Error, proto as pb};

const SERVER_NAME: &str = "localhost";

fn trusting(pki: &Pki) -> ConnectOptions {
    ConnectOptions::default()
        .ca_certificate(pki.ca_pem())
        .tls_server_name(SERVER_NAME)
}

async fn lookup(client: &Client) -> Result<pb::LookupResponse, Error> {
    client
        .lookup(pb::LookupRequest {
            namespace: "payments".into(),
            operation_key: "k".into(),
            ..Default::default()
        })
        .await
}

/// True when the connection itself was refused: no registry answer came.
fn refused_on_connecting(answer: &Result<pb::LookupResponse, Error>, why: &str) -> bool {
    let refused = matches!(answer, Err(Error::Unavailable { .. } | Error::Other(_)));
    refused && format!("{answer:?}").contains(why)
}

/// True when the call got an answer from the registry (found or not).
fn served(answer: &Result<pb::LookupResponse, Error>) -> bool {
    matches!(answer, Ok(_) | Err(Error::NotFound { .. }))
}

async fn tls_app(pki: &Pki, client_ca: Option<PathBuf>, policy: Option<PathBuf>) -> TestApp {
    let (certificate, key) = pki.server_files();
    spawn_app_with(|config| {
        config.listeners.tls_cert = Some(certificate);
        config.listeners.tls_key = Some(key);
        config.listeners.tls_client_ca = client_ca;
        config.listeners.auth_file = policy;
    })
    .await
}

#[tokio::test]
async fn a_client_that_trusts_the_ca_is_served_and_plaintext_is_not() {
    let pki = Pki::new("server-tls");
    let app = tls_app(&pki, None, None).await;
    let client = Client::connect_with(app.endpoint.clone(), &trusting(&pki))
        .await
        .unwrap();
    let claimed = client
        .claim(claim_request(
            "payments",
            "tls-1",
            "w",
            serde_json::json!({"a": 1}),
        ))
        .await
        .unwrap();
    assert!(claimed.lease.is_some());

    let plaintext = app.endpoint.replace("https://", "http://");
    let plain = Client::connect_lazy(plaintext).unwrap();
    let refused = lookup(&plain).await;
    assert!(
        refused_on_connecting(&refused, "broken pipe"),
        "{refused:?}"
    );

    let other = Pki::new("server-tls-other");
    let untrusting = Client::connect_lazy_with(app.endpoint.clone(), &trusting(&other)).unwrap();
    let refused = lookup(&untrusting).await;
    assert!(
        refused_on_connecting(&refused, "UnknownIssuer"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn mutual_tls_requires_a_certificate_and_its_identity_names_the_principal() {
    let pki = Pki::new("mtls");
    let policy = write(
        &pki.dir.join("policy.toml"),
        r#"
        [[principal]]
        name = "payments-service"
        tls_identity = "spiffe://opreg.test/payments"
        namespaces = ["payments"]
        roles = ["worker"]
        "#,
    );
    let app = tls_app(&pki, Some(pki.ca_file()), Some(policy)).await;

    let known = pki.client("spiffe://opreg.test/payments");
    let options = trusting(&pki).client_identity(known.certificate, known.key);
    let client = Client::connect_with(app.endpoint.clone(), &options)
        .await
        .unwrap();
    let answer = lookup(&client).await;
    assert!(served(&answer), "{answer:?}");
    let elsewhere = client
        .lookup(pb::LookupRequest {
            namespace: "billing".into(),
            operation_key: "k".into(),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(elsewhere, Err(Error::PermissionDenied { ref principal, .. }) if principal == "payments-service")
    );

    let no_certificate = Client::connect_lazy_with(app.endpoint.clone(), &trusting(&pki)).unwrap();
    let refused = lookup(&no_certificate).await;
    assert!(
        refused_on_connecting(&refused, "CertificateRequired"),
        "{refused:?}"
    );

    let stranger = Pki::new("mtls-stranger").client("spiffe://opreg.test/payments");
    let foreign = trusting(&pki).client_identity(stranger.certificate, stranger.key);
    let refused = lookup(&Client::connect_lazy_with(app.endpoint.clone(), &foreign).unwrap()).await;
    assert!(refused_on_connecting(&refused, "UnknownCA"), "{refused:?}");

    let unknown = pki.client("spiffe://opreg.test/unknown");
    let unnamed = trusting(&pki).client_identity(unknown.certificate, unknown.key);
    let refused = lookup(
        &Client::connect_with(app.endpoint.clone(), &unnamed)
            .await
            .unwrap(),
    )
    .await;
    assert!(
        matches!(refused, Err(Error::Unauthenticated { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn new_certificate_files_are_served_without_a_restart() {
    let pki = Pki::new("rotation");
    let app = tls_app(&pki, None, None).await;
    let (certificate, key) = (pki.dir.join("server.pem"), pki.dir.join("server-key.pem"));

    // The new CA replaces the old one; only clients that trust it are served.
    let next = Pki::new("rotation-next");
    let issued = next.server();
    std::fs::write(&key, issued.key).unwrap();
    std::fs::write(&certificate, issued.certificate).unwrap();
    let mut rotated = false;
    for _ in 0..50 {
        // A new client each time: connections keep the certificate they began with.
        let client = Client::connect_lazy_with(app.endpoint.clone(), &trusting(&next)).unwrap();
        if served(&lookup(&client).await) {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rotated, "the new certificate was not served");
    let old = Client::connect_lazy_with(app.endpoint.clone(), &trusting(&pki)).unwrap();
    let refused = lookup(&old).await;
    assert!(
        refused_on_connecting(&refused, "UnknownIssuer"),
        "{refused:?}"
    );
}
