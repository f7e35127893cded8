//! Authentication at the edge, before a message is decoded: every call to
//! opreg's own services is matched to a principal of the policy by its API key
//! or its connection's client certificate, or refused UNAUTHENTICATED. Health
//! and reflection stay open. The handlers authorize what the caller found here
//! may do ([`crate::grpc::Gate`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::incoming::ConnectionInfo;
use crate::access::{Access, Credentials, Needed};
use crate::grpc::status::to_status;
use crate::telemetry::metrics;

#[derive(Clone, Debug)]
pub struct AuthenticateLayer {
    access: Access,
}

impl AuthenticateLayer {
    pub fn new(access: Access) -> Self {
        Self { access }
    }
}

impl<S> Layer<S> for AuthenticateLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticate {
            inner,
            access: self.access.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Authenticate<S> {
    inner: S,
    access: Access,
}

/// Calls to opreg's services; health and reflection are not.
fn needs_identity(path: &str) -> bool {
    path.starts_with("/opreg.v1.")
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Authenticate<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        if needs_identity(request.uri().path()) {
            let tls_identities = request
                .extensions()
                .get::<ConnectionInfo>()
                .map(|connection| std::sync::Arc::clone(&connection.tls_identities))
                .unwrap_or_default();
            let authenticated = self.access.authenticate(Credentials {
                authorization: request
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .map(http::HeaderValue::as_bytes),
                tls_identities: &tls_identities,
            });
            match authenticated {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                    if let Some(needed) = Needed::by(request.uri().path()) {
                        request.extensions_mut().insert(needed);
                    }
                }
                Err(refusal) => {
                    metrics::auth_refused("unauthenticated");
                    tracing::debug!(
                        path = request.uri().path(),
                        "call without valid credentials refused"
                    );
                    let refused = to_status(&refusal).into_http();
                    return Box::pin(async move { Ok(refused) });
                }
            }
        }
        Box::pin(self.inner.call(request))
    }
}
