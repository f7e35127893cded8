//! Who may call what. A caller is authenticated once per call, before its
//! message is decoded ([`crate::transport::AuthenticateLayer`]), by an API key
//! or a TLS client identity named in the policy file, and marked with the role
//! its RPC needs ([`RPC_ROLES`]); each handler then authorizes that role in the
//! namespace the request names ([`Caller::authorize`]). Without a policy every caller is let through, which
//! the configuration allows only on loopback or when told so explicitly.

mod policy;
pub mod reload;
pub mod tls;

use std::sync::{Arc, RwLock};

pub use policy::Policy;

use crate::domain::error::RegistryError;

/// What an RPC needs ([`RPC_ROLES`]). A worker and an admin can also read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Reads: nothing changes.
    Reader,
    /// Executes operations: claims, completes, renews, fenced writes.
    Worker,
    /// The operator's actions.
    Admin,
}

/// The role each RPC needs, by its gRPC path: the one place that says it.
/// The authentication layer marks every call with its entry ([`Needed`]), the
/// handlers authorize it, and the access test walks this table after checking
/// that it names every method of the contract. A path missing here is refused.
pub const RPC_ROLES: &[(&str, Role)] = &[
    ("/opreg.v1.OperationRegistry/Claim", Role::Worker),
    ("/opreg.v1.OperationRegistry/Complete", Role::Worker),
    ("/opreg.v1.OperationRegistry/Lookup", Role::Reader),
    ("/opreg.v1.OperationRegistry/Renew", Role::Worker),
    ("/opreg.v1.OperationRegistry/FencedWrite", Role::Worker),
    ("/opreg.v1.OperationRegistry/GetResource", Role::Reader),
    ("/opreg.v1.OperationRegistry/ClaimDue", Role::Worker),
    ("/opreg.v1.OperationRegistry/BatchClaim", Role::Worker),
    ("/opreg.v1.OperationRegistry/BatchComplete", Role::Worker),
    ("/opreg.v1.OperationAdmin/ListOperations", Role::Reader),
    ("/opreg.v1.OperationAdmin/ResolveOperation", Role::Admin),
    ("/opreg.v1.OperationAdmin/RequeueOperation", Role::Admin),
    ("/opreg.v1.OperationAdmin/HoldOperation", Role::Admin),
    ("/opreg.v1.OperationAdmin/ReleaseOperation", Role::Admin),
];

/// The role a call's RPC needs, as [`RPC_ROLES`] says, carried in the call's
/// extensions from the authentication layer to the handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needed(pub Role);

impl Needed {
    /// The entry of [`RPC_ROLES`] for `path`, if it has one.
    pub fn by(path: &str) -> Option<Self> {
        RPC_ROLES
            .iter()
            .find(|(rpc, _)| *rpc == path)
            .map(|&(_, role)| Self(role))
    }
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reader => "reader",
            Self::Worker => "worker",
            Self::Admin => "admin",
        }
    }
}

/// The namespaces a principal is granted: exact names or a prefix (`prefix*`;
/// `*` alone is every namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespacePattern {
    Exact(String),
    Prefix(String),
}

impl NamespacePattern {
    fn matches(&self, namespace: &str) -> bool {
        match self {
            Self::Exact(exact) => exact == namespace,
            Self::Prefix(prefix) => namespace.starts_with(prefix.as_str()),
        }
    }
}

/// One entry of the policy file.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    api_key_sha256: Option<[u8; 32]>,
    tls_identity: Option<String>,
    namespaces: Vec<NamespacePattern>,
    roles: Vec<Role>,
}

impl Principal {
    fn may(&self, needed: Role) -> bool {
        self.roles.iter().any(|&role| {
            role == needed || (needed == Role::Reader && matches!(role, Role::Worker | Role::Admin))
        })
    }

    fn covers(&self, namespace: &str) -> bool {
        self.namespaces
            .iter()
            .any(|pattern| pattern.matches(namespace))
    }
}

/// The authenticated caller of one call, kept in the request's extensions.
#[derive(Clone, Debug)]
pub enum Caller {
    /// No policy is configured: everyone may do everything.
    Unrestricted,
    Principal(Arc<Principal>),
}

/// Longest namespace echoed back in a refusal's metadata.
const ECHOED_NAMESPACE_BYTES: usize = 128;

impl Caller {
    /// Allows the call when the caller holds `needed` in `namespace`.
    pub fn authorize(&self, needed: Role, namespace: &str) -> Result<(), RegistryError> {
        let Self::Principal(principal) = self else {
            return Ok(());
        };
        if principal.may(needed) && principal.covers(namespace) {
            return Ok(());
        }
        Err(RegistryError::PermissionDenied {
            principal: principal.name.clone(),
            namespace: crate::domain::text::truncated(namespace, ECHOED_NAMESPACE_BYTES),
            role: needed.as_str(),
        })
    }

    /// The caller's roles, as the console shows them ("admin", "reader").
    pub fn roles(&self) -> Vec<&'static str> {
        match self {
            Self::Unrestricted => vec![Role::Admin.as_str()],
            Self::Principal(principal) => {
                principal.roles.iter().map(|role| role.as_str()).collect()
            }
        }
    }

    /// The SHA-256 of the principal's API key, as the policy has it: a
    /// console session holds while it stays the same.
    pub fn key_sha256(&self) -> Option<[u8; 32]> {
        match self {
            Self::Unrestricted => None,
            Self::Principal(principal) => principal.api_key_sha256,
        }
    }

    /// The principal's name as the audit trail records it; empty without a policy.
    pub fn name(&self) -> &str {
        match self {
            Self::Unrestricted => "",
            Self::Principal(principal) => &principal.name,
        }
    }
}

/// The credentials a call arrived with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credentials<'a> {
    /// The `authorization` header's value, if any.
    pub authorization: Option<&'a [u8]>,
    /// The verified client certificate's URI and DNS names (mutual TLS).
    pub tls_identities: &'a [String],
}

/// The current policy, replaced whole on reload; `None` when none is configured.
#[derive(Clone, Debug, Default)]
pub struct Access {
    policy: Option<Arc<RwLock<Arc<Policy>>>>,
}

impl Access {
    /// Everyone may do everything.
    pub fn unrestricted() -> Self {
        Self::default()
    }

    pub fn with_policy(policy: Policy) -> Self {
        Self {
            policy: Some(Arc::new(RwLock::new(Arc::new(policy)))),
        }
    }

    pub fn is_restricted(&self) -> bool {
        self.policy.is_some()
    }

    /// Swaps in a newly read policy; calls already authenticated keep theirs.
    pub fn replace(&self, policy: Policy) {
        if let Some(current) = &self.policy {
            *current
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(policy);
        }
    }

    fn current(&self) -> Option<Arc<Policy>> {
        self.policy.as_ref().map(|current| {
            Arc::clone(
                &current
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            )
        })
    }

    /// The principal of this name in the current policy, for a console
    /// session signed in earlier: a principal removed from the policy since
    /// is signed out, and one whose roles changed acts with the new ones.
    /// `None` without a policy too.
    pub fn principal_named(&self, name: &str) -> Option<Caller> {
        let policy = self.current()?;
        policy
            .by_name(name)
            .map(|principal| Caller::Principal(Arc::clone(principal)))
    }

    /// Who is calling. A key that is sent must be known: a wrong key is
    /// refused, not ignored in favour of the certificate. A principal with
    /// both credentials in the policy must present both.
    pub fn authenticate(&self, credentials: Credentials<'_>) -> Result<Caller, RegistryError> {
        let Some(policy) = self.current() else {
            return Ok(Caller::Unrestricted);
        };
        let by_certificate = policy.by_tls_identity(credentials.tls_identities);
        let principal = match credentials.authorization {
            Some(header) => {
                let key = bearer_token(header).ok_or(RegistryError::Unauthenticated)?;
                let principal = policy
                    .by_api_key(key)
                    .ok_or(RegistryError::Unauthenticated)?;
                if principal.tls_identity.is_some()
                    && !by_certificate.is_some_and(|found| Arc::ptr_eq(found, principal))
                {
                    return Err(RegistryError::Unauthenticated);
                }
                principal
            }
            None => by_certificate
                .filter(|principal| principal.api_key_sha256.is_none())
                .ok_or(RegistryError::Unauthenticated)?,
        };
        Ok(Caller::Principal(Arc::clone(principal)))
    }
}

/// The key of `Bearer <key>` (the scheme is case-insensitive).
fn bearer_token(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        let sha256 = |key: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key));
        let (k1, k2) = (sha256("k1"), sha256("k2"));
        Access::with_policy(
            Policy::parse(&format!(
                r#"
                [[principal]]
                name = "payments"
                api_key_sha256 = "{k1}"
                namespaces = ["payments", "tenant-*"]
                roles = ["worker"]

                [[principal]]
                name = "both"
                api_key_sha256 = "{k2}"
                tls_identity = "spiffe://x/both"
                namespaces = ["*"]
                roles = ["admin"]

                [[principal]]
                name = "cert"
                tls_identity = "spiffe://x/cert"
                namespaces = ["ops"]
                roles = ["reader"]
                "#
            ))
            .unwrap(),
        )
    }

    fn caller(access: &Access, header: Option<&str>, identities: &[&str]) -> Option<String> {
        let identities: Vec<String> = identities.iter().map(|&id| id.to_owned()).collect();
        access
            .authenticate(Credentials {
                authorization: header.map(str::as_bytes),
                tls_identities: &identities,
            })
            .ok()
            .map(|caller| caller.name().to_owned())
    }

    #[test]
    fn credentials_name_one_principal_or_none() {
        let access = access();
        assert_eq!(
            caller(&access, Some("Bearer k1"), &[]).as_deref(),
            Some("payments")
        );
        assert_eq!(
            caller(&access, Some("bearer k1"), &[]).as_deref(),
            Some("payments")
        );
        assert_eq!(
            caller(&access, Some("Bearer nope"), &["spiffe://x/cert"]),
            None
        );
        assert_eq!(caller(&access, Some("k1"), &[]), None);
        assert_eq!(caller(&access, None, &[]), None);
        assert_eq!(
            caller(&access, None, &["spiffe://x/cert"]).as_deref(),
            Some("cert")
        );
        // Both credentials are configured for "both": both are needed.
        assert_eq!(caller(&access, Some("Bearer k2"), &[]), None);
        assert_eq!(caller(&access, None, &["spiffe://x/both"]), None);
        assert_eq!(
            caller(&access, Some("Bearer k2"), &["spiffe://x/both"]).as_deref(),
            Some("both")
        );
        assert_eq!(
            caller(&Access::unrestricted(), None, &[]).as_deref(),
            Some("")
        );
    }

    #[test]
    fn roles_and_namespaces_are_both_needed() {
        let access = access();
        let worker = access
            .authenticate(Credentials {
                authorization: Some(b"Bearer k1"),
                tls_identities: &[],
            })
            .unwrap();
        assert!(worker.authorize(Role::Worker, "payments").is_ok());
        assert!(worker.authorize(Role::Reader, "tenant-7").is_ok());
        assert!(worker.authorize(Role::Worker, "paymentsx").is_err());
        let denied = worker.authorize(Role::Admin, "payments").unwrap_err();
        assert_eq!(
            denied,
            RegistryError::PermissionDenied {
                principal: "payments".into(),
                namespace: "payments".into(),
                role: "admin",
            }
        );
        assert!(Caller::Unrestricted.authorize(Role::Admin, "x").is_ok());
    }
}
