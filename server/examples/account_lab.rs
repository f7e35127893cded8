//! The account lab through the transactional door for Rust
//! (`opreg_server::in_transaction`): the same seven steps as
//! `examples/sql_door_lab.sql`, on a caller's own sqlx transactions, with no
//! opreg server in between. Each step checks what it expects and says it; any
//! other answer stops the lab with an error.
//!
//!     cargo run -p opreg-server --example account_lab -- postgres://opreg@/opreg?host=/var/lib/opreg/run
//!
//! The database is a registry's (migrated by opreg-server, or by this example,
//! which runs the same migrations). The role needs the registry's tables: this
//! door runs the registry's statements itself.

use std::time::Duration;

use opreg_proto::v1 as pb;
use opreg_server::config::Config;
use opreg_server::domain::error::RegistryError;
use opreg_server::in_transaction::{self, InTransaction};
use opreg_server::store;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

const NS: &str = "rust-door-lab";

type Outcome<T> = Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Outcome<()> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: account_lab POSTGRES_URL")?;
    let options: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(in_transaction::connect_options(options))
        .await?;
    store::MIGRATOR.run(&pool).await?;
    let lab = Lab {
        door: InTransaction::new(Config::defaults().request_limits()?),
        pool,
    };
    lab.open_account().await?;
    lab.debit_once().await?;
    lab.a_second_caller_waits().await?;
    lab.replay_and_conflict().await?;
    lab.business_error_rolls_back().await?;
    lab.unknown_outcome().await?;
    lab.takeover().await?;
    println!("rust door lab: ok");
    Ok(())
}

struct Lab {
    door: InTransaction,
    pool: PgPool,
}

/// Stops the lab unless `holds`.
fn expect(holds: bool, what: &str) -> Outcome<()> {
    if holds {
        Ok(())
    } else {
        Err(format!("the lab expected {what}").into())
    }
}

fn name(outcome: pb::ClaimOutcome) -> &'static str {
    outcome.as_str_name().trim_start_matches("CLAIM_OUTCOME_")
}

/// The contract's reason for the refusals the lab meets.
fn reason(error: &RegistryError) -> String {
    match error {
        RegistryError::ParameterConflict { .. } => "PARAMETER_CONFLICT".into(),
        RegistryError::StaleFencingToken { .. } => "STALE_FENCING_TOKEN".into(),
        RegistryError::OperationNotFound => "OPERATION_NOT_FOUND".into(),
        other => format!("{other:?}"),
    }
}

fn claim(key: &str, owner: &str, amount: i64, lease: Option<Duration>) -> pb::ClaimRequest {
    pb::ClaimRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
            opreg_proto::parameters::json_to_struct(
                serde_json::json!({"account": "A", "amount": amount}),
            ),
        )),
        owner: owner.into(),
        lease_ttl: lease.map(|lease| prost_types::Duration {
            seconds: i64::try_from(lease.as_secs()).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        ..Default::default()
    }
}

fn complete(key: &str, token: u64, outcome: pb::complete_request::Outcome) -> pb::CompleteRequest {
    pb::CompleteRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        fencing_token: token,
        outcome: Some(outcome),
    }
}

fn success(result: &str) -> pb::complete_request::Outcome {
    pb::complete_request::Outcome::Success(pb::Success {
        result: result.as_bytes().to_vec(),
        result_ref: String::new(),
    })
}

fn write(key: &str, token: u64, value: &[u8]) -> pb::FencedWriteRequest {
    pb::FencedWriteRequest {
        namespace: NS.into(),
        resource: format!("ledger:{key}"),
        operation_key: key.into(),
        fencing_token: token,
        value: value.to_vec(),
    }
}

fn token_of(answer: &pb::ClaimResponse) -> Outcome<u64> {
    Ok(answer.lease.as_ref().ok_or("a lease")?.fencing_token)
}

impl Lab {
    async fn open_account(&self) -> Outcome<()> {
        sqlx::raw_sql(
            "DROP TABLE IF EXISTS rust_lab_accounts;
             CREATE TABLE rust_lab_accounts (id text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
             INSERT INTO rust_lab_accounts VALUES ('A', 100);
             DELETE FROM operations WHERE namespace = 'rust-door-lab';
             DELETE FROM resources WHERE namespace = 'rust-door-lab';",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn balance(&self) -> Outcome<i64> {
        Ok(
            sqlx::query_scalar("SELECT balance FROM rust_lab_accounts WHERE id = 'A'")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn debit(tx: &mut PgConnection, amount: i64) -> Outcome<i64> {
        Ok(sqlx::query_scalar(
            "UPDATE rust_lab_accounts SET balance = balance - $1 WHERE id = 'A' RETURNING balance",
        )
        .bind(amount)
        .fetch_one(tx)
        .await?)
    }

    /// Step 1: claim, debit and complete in one transaction.
    async fn debit_once(&self) -> Outcome<()> {
        let mut tx = self.pool.begin().await?;
        let claimed = self
            .door
            .claim(&mut tx, claim("debit:1", "teller-1", 30, None))
            .await?;
        println!("step 1 claim debit:1: {}", name(claimed.outcome()));
        expect(claimed.outcome() == pb::ClaimOutcome::Acquired, "ACQUIRED")?;
        let balance = Self::debit(&mut tx, 30).await?;
        let token = token_of(&claimed)?;
        let result = format!("{{\"balance\": {balance}}}");
        self.door
            .complete(&mut tx, complete("debit:1", token, success(&result)))
            .await?;
        tx.commit().await?;
        println!("step 1 balance: {}", self.balance().await?);
        expect(self.balance().await? == 70, "a balance of 70")
    }

    /// Step 2: a second transaction claims the key while the first one's
    /// registration is uncommitted; it waits, then replays what committed.
    async fn a_second_caller_waits(&self) -> Outcome<()> {
        let mut first = self.pool.begin().await?;
        let claimed = self
            .door
            .claim(&mut first, claim("debit:2", "teller-1", 30, None))
            .await?;
        println!(
            "step 2 first caller claims debit:2: {}",
            name(claimed.outcome())
        );
        let balance = Self::debit(&mut first, 30).await?;
        let second = {
            let (pool, door) = (self.pool.clone(), self.door.clone());
            tokio::spawn(async move {
                let mut tx = pool.begin().await?;
                let answer = door
                    .claim(&mut tx, claim("debit:2", "teller-2", 30, None))
                    .await;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(answer)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!("step 2 second caller waits: {}", !second.is_finished());
        expect(!second.is_finished(), "the second caller to wait")?;
        let result = format!("{{\"balance\": {balance}}}");
        self.door
            .complete(
                &mut first,
                complete("debit:2", token_of(&claimed)?, success(&result)),
            )
            .await?;
        first.commit().await?;
        let answer = second.await??.map_err(|error| reason(&error))?;
        let stored = String::from_utf8(answer.operation.clone().unwrap_or_default().result)?;
        println!(
            "step 2 second caller, after the commit: {} {stored}",
            name(answer.outcome())
        );
        expect(answer.outcome() == pb::ClaimOutcome::Replayed, "REPLAYED")?;
        println!("step 2 balance: {}", self.balance().await?);
        expect(self.balance().await? == 40, "a balance of 40")
    }

    /// Steps 3 and 4: the replay, and the same key with another amount.
    async fn replay_and_conflict(&self) -> Outcome<()> {
        let mut tx = self.pool.begin().await?;
        let replayed = self
            .door
            .claim(&mut tx, claim("debit:1", "teller-1", 30, None))
            .await?;
        let stored = String::from_utf8(replayed.operation.clone().unwrap_or_default().result)?;
        println!(
            "step 3 claim debit:1 again: {} {stored}",
            name(replayed.outcome())
        );
        expect(replayed.outcome() == pb::ClaimOutcome::Replayed, "REPLAYED")?;
        let refused = self
            .door
            .claim(&mut tx, claim("debit:1", "teller-1", 101, None))
            .await
            .err()
            .ok_or("a conflict")?;
        println!("step 4 claim debit:1 with amount 101: {}", reason(&refused));
        expect(
            reason(&refused) == "PARAMETER_CONFLICT",
            "PARAMETER_CONFLICT",
        )?;
        tx.commit().await?;
        println!("step 4 balance: {}", self.balance().await?);
        expect(self.balance().await? == 40, "a balance of 40")
    }

    /// Step 5: the business refuses after the claim; the rollback takes the
    /// claim with it.
    async fn business_error_rolls_back(&self) -> Outcome<()> {
        let mut tx = self.pool.begin().await?;
        let claimed = self
            .door
            .claim(&mut tx, claim("debit:3", "teller-1", 30, None))
            .await?;
        println!("step 5 claim debit:3: {}", name(claimed.outcome()));
        Self::debit(&mut tx, 30).await?;
        let business = sqlx::raw_sql(
            "DO $$ BEGIN
                 IF (SELECT balance FROM rust_lab_accounts WHERE id = 'A') < 20 THEN
                     RAISE EXCEPTION 'insufficient funds' USING ERRCODE = 'P0001';
                 END IF;
             END $$",
        )
        .execute(&mut *tx)
        .await
        .err()
        .ok_or("the business error")?;
        let code = business
            .as_database_error()
            .and_then(|error| error.code())
            .unwrap_or_default();
        println!("step 5 business error: {code}");
        tx.rollback().await?;
        let rows: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM operations WHERE namespace = $1 AND operation_key = 'debit:3'",
        )
        .bind(NS)
        .fetch_one(&self.pool)
        .await?;
        println!("step 5 operationRows={rows}");
        expect(rows == 0 && code == "P0001", "no record after the rollback")?;
        println!("step 5 balance: {}", self.balance().await?);
        expect(self.balance().await? == 40, "a balance of 40")
    }

    /// Step 6: an outcome nobody knows; the next claim reconciles.
    async fn unknown_outcome(&self) -> Outcome<()> {
        let mut conn = self.pool.acquire().await?;
        let claimed = self
            .door
            .claim(&mut conn, claim("payout:1", "payout-worker", 10, None))
            .await?;
        println!("step 6 claim payout:1: {}", name(claimed.outcome()));
        let first = token_of(&claimed)?;
        let unknown = pb::complete_request::Outcome::Unknown(pb::UnknownOutcome {
            remote_ref: "bank-tx-7".into(),
            message: "bank call timed out".into(),
        });
        self.door
            .complete(&mut conn, complete("payout:1", first, unknown))
            .await?;
        let reconciling = self
            .door
            .claim(&mut conn, claim("payout:1", "reconciler", 10, None))
            .await?;
        let remote_ref = reconciling.operation.clone().unwrap_or_default().remote_ref;
        println!(
            "step 6 claim by the reconciler: {} remote_ref={remote_ref}",
            name(reconciling.outcome())
        );
        let newer = token_of(&reconciling)? > first;
        println!("step 6 reconciler's token > first token: {newer}");
        expect(
            reconciling.outcome() == pb::ClaimOutcome::Reconcile && newer,
            "RECONCILE",
        )
    }

    /// Step 7: a lease runs out, another worker takes over, and the first
    /// one's write and report are refused.
    async fn takeover(&self) -> Outcome<()> {
        let mut conn = self.pool.acquire().await?;
        let lease = Some(Duration::from_secs(1));
        let a = self
            .door
            .claim(&mut conn, claim("transfer:1", "worker-a", 5, lease))
            .await?;
        let a_token = token_of(&a)?;
        println!(
            "step 7 worker-a claims transfer:1 with a 1 s lease: {}",
            name(a.outcome())
        );
        let written = self
            .door
            .fenced_write(&mut conn, write("transfer:1", a_token, b"a"))
            .await?;
        println!(
            "step 7 worker-a writes the ledger: version {}",
            written.version
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let b = self
            .door
            .claim(&mut conn, claim("transfer:1", "worker-b", 5, None))
            .await?;
        let b_token = token_of(&b)?;
        println!(
            "step 7 worker-b claims after the lease expired: {}",
            name(b.outcome())
        );
        expect(
            b.outcome() == pb::ClaimOutcome::Acquired && b_token > a_token,
            "a takeover",
        )?;
        let stale_write = self
            .door
            .fenced_write(&mut conn, write("transfer:1", a_token, b"a"))
            .await
            .err()
            .ok_or("a stale write refused")?;
        println!("step 7 worker-a writes again: {}", reason(&stale_write));
        let stale_report = self
            .door
            .complete(&mut conn, complete("transfer:1", a_token, success("late")))
            .await
            .err()
            .ok_or("a stale report refused")?;
        println!("step 7 worker-a completes: {}", reason(&stale_report));
        expect(
            reason(&stale_write) == "STALE_FENCING_TOKEN"
                && reason(&stale_report) == "STALE_FENCING_TOKEN",
            "STALE_FENCING_TOKEN",
        )?;
        let written = self
            .door
            .fenced_write(&mut conn, write("transfer:1", b_token, b"b"))
            .await?;
        println!(
            "step 7 worker-b writes the ledger: version {}",
            written.version
        );
        let done = self
            .door
            .complete(&mut conn, complete("transfer:1", b_token, success("moved")))
            .await?;
        let status = done.operation.unwrap_or_default().status();
        println!(
            "step 7 worker-b completes: {}",
            status.as_str_name().trim_start_matches("OPERATION_STATUS_")
        );
        expect(status == pb::OperationStatus::Succeeded, "SUCCEEDED")
    }
}
