//! The transactional door for Rust services whose data lives in opreg's
//! PostgreSQL: Claim, Complete, FencedWrite and Lookup on the caller's own
//! connection, inside its own transaction, with no opreg server in between.
//! The operation record and the business write then commit together, or roll
//! back together and leave no trace.
//!
//! The door speaks the contract's messages and answers as the server would:
//! requests are checked by the same code as at the gRPC edge
//! (`grpc/requests.rs`), and each use case is the registry's own, on the
//! connection given (`registry::claim_on`, `complete_in_transaction`,
//! `fenced_write_on`, `lookup_on`), so the statements are the server's, not a
//! copy. What differs is only what the server adds around them: no shared
//! statements with other callers, no replay cache, no rate limits, and no
//! namespace policy (the database role is the boundary; the SQL door's
//! functions, `opreg_sql`, check `opreg_sql.namespace_grants`, this door runs
//! the statements directly and needs the tables themselves).
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, claim: opreg_proto::v1::ClaimRequest,
//! #     complete: opreg_proto::v1::CompleteRequest) -> Result<(), Box<dyn std::error::Error>> {
//! use opreg_server::config::Config;
//! use opreg_server::in_transaction::InTransaction;
//!
//! // The pool is made with in_transaction::connect_options(...).
//! let door = InTransaction::new(Config::defaults().request_limits()?);
//! let mut tx = pool.begin().await?;
//! let claimed = door.claim(&mut tx, claim).await?;
//! // ... the business writes, on &mut *tx, fenced by claimed.lease ...
//! door.complete(&mut tx, complete).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! The transaction must run at READ COMMITTED (PostgreSQL's default): a
//! second Claim of a key another transaction registered and has not committed
//! waits for that transaction, then answers from what it committed, or
//! registers the key itself if it rolled back; at REPEATABLE READ or above
//! PostgreSQL refuses that second Claim with a serialization failure instead.

use opreg_proto::v1 as pb;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use crate::domain::error::RegistryError;
use crate::grpc::requests::{self, RequestLimits};
use crate::grpc::responses::{self, Parameters};
use crate::registry;

/// The connection setting the registry's statements are written for, as on
/// the server's own sessions (`store/session.rs`): plans made once per
/// connection and kept (`plan_cache_mode = force_generic_plan`). Give it to
/// the pool whose transactions use the door; without it PostgreSQL plans each
/// Claim and Complete afresh, which costs several times running them. The
/// pool's other statements are then planned once too: keep a pool of their
/// own for statements that need a plan per call.
pub fn connect_options(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("plan_cache_mode", "force_generic_plan")])
}

/// Claim, Complete, FencedWrite and Lookup inside a caller's transaction,
/// checked against `limits` as the server checks its requests.
#[derive(Clone, Debug)]
pub struct InTransaction {
    limits: RequestLimits,
}

impl InTransaction {
    pub fn new(limits: RequestLimits) -> Self {
        Self { limits }
    }

    /// Registers the operation or answers from what exists, as Claim does; the
    /// registration is the caller's until its transaction commits.
    pub async fn claim(
        &self,
        db: &mut PgConnection,
        request: pb::ClaimRequest,
    ) -> Result<pb::ClaimResponse, RegistryError> {
        let command = requests::claim(request, &self.limits)?;
        registry::claim_on(db, &command).await.map(responses::claim)
    }

    /// Records an outcome under a fencing token, as Complete does.
    pub async fn complete(
        &self,
        db: &mut PgConnection,
        request: pb::CompleteRequest,
    ) -> Result<pb::CompleteResponse, RegistryError> {
        let command = requests::complete(request, &self.limits)?;
        let operation = registry::complete_in_transaction(db, &command).await?;
        Ok(pb::CompleteResponse {
            operation: Some(responses::operation(operation, Parameters::Omitted)),
        })
    }

    /// Writes a resource under the operation's current token, as FencedWrite
    /// does: the operation's row stays locked until the caller's transaction
    /// ends, so no takeover lands between this write and the commit. A
    /// refusal writes nothing and leaves the transaction usable. On a
    /// connection outside a transaction the lock and the write still share
    /// one.
    pub async fn fenced_write(
        &self,
        db: &mut PgConnection,
        request: pb::FencedWriteRequest,
    ) -> Result<pb::FencedWriteResponse, RegistryError> {
        let command = requests::fenced_write(request, &self.limits)?;
        // A savepoint inside the caller's transaction, or a transaction of
        // its own outside one.
        let mut scope = db.begin().await?;
        let (fence, version) = registry::fenced_write_on(&mut scope, &command).await?;
        scope.commit().await?;
        Ok(pb::FencedWriteResponse { fence, version })
    }

    /// The operation as this transaction sees it, its own changes included.
    pub async fn lookup(
        &self,
        db: &mut PgConnection,
        request: pb::LookupRequest,
    ) -> Result<pb::LookupResponse, RegistryError> {
        let parameters = if request.include_parameters {
            Parameters::Included
        } else {
            Parameters::Omitted
        };
        let query = requests::lookup(request)?;
        let answer = registry::lookup_on(db, &query).await?;
        Ok(responses::lookup(answer, parameters))
    }
}
