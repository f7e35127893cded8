//! The account lab's business table, for the tests of the transactional
//! doors: one account, `A`, that a debit may not take below zero.

use sqlx::{PgConnection, PgPool};

pub const OPENING_BALANCE: i64 = 100;

pub async fn open_account(db: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
         INSERT INTO accounts VALUES ('A', 100);",
    )
    .execute(db)
    .await
    .unwrap();
}

/// The business write: debits account A, refused below zero (`23514`).
pub async fn debit(db: &mut PgConnection, amount: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE accounts SET balance = balance - $1 WHERE id = 'A'")
        .bind(amount)
        .execute(db)
        .await
        .map(drop)
}

pub async fn balance(db: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 'A'")
        .fetch_one(db)
        .await
        .unwrap()
}

/// How many operations `namespace` holds under `key`: 0 or 1.
pub async fn operation_rows(db: &PgPool, namespace: &str, key: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM operations WHERE namespace = $1 AND operation_key = $2",
    )
    .bind(namespace)
    .bind(key)
    .fetch_one(db)
    .await
    .unwrap()
}
