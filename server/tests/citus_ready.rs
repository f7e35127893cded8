//! What can be proven on one PostgreSQL of the schema and the statements
//! running on Citus (deploy/citus/README.md): every table is declared as
//! colocated by `operation_key`, distributed by its own key, a reference table
//! or a coordinator-local one; every unique and foreign key of a distributed
//! table includes its distribution column; and every statement the server
//! runs on the hot path (Claim in each of its forms, Complete in each outcome,
//! Renew, FencedWrite, GetResource, Lookup, BatchClaim, BatchComplete) names
//! the distribution column of each distributed table it reads or writes, so
//! it reaches one shard per key. The statements are the ones the server
//! really sent, read from sqlx's own statement log, and listed with their
//! reach (ClaimDue's and the admin's too, which may reach every shard).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use common::*;
use opreg_client::proto as pb;
use regex::Regex;
use serde_json::json;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tracing_subscriber::layer::{Context, SubscriberExt};

const NS: &str = "citus";

// --- where each table lives on Citus ----------------------------------------

/// How a table is placed on Citus.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Placement {
    /// Distributed by this column, in the one colocation group of an operation.
    Colocated(&'static str),
    /// Distributed by its own key column, in a group of its own.
    OwnKey(&'static str),
    /// Small and read everywhere: a copy on every node.
    Reference,
    /// Kept on the coordinator only: never joined with a distributed table.
    CoordinatorLocal,
}

/// Every table of the schema, and where it goes. A new table fails the check
/// until it is placed here and in deploy/citus/README.md.
const PLACEMENTS: &[(&str, Placement)] = &[
    ("public.operations", Placement::Colocated("operation_key")),
    (
        "public.execution_history",
        Placement::Colocated("operation_key"),
    ),
    (
        "public.audit_entries",
        Placement::Colocated("operation_key"),
    ),
    ("public.resources", Placement::OwnKey("resource")),
    ("public.leader_leases", Placement::Reference),
    ("opreg_sql.namespace_grants", Placement::Reference),
    ("public.console_sessions", Placement::CoordinatorLocal),
    ("public.console_jobs", Placement::CoordinatorLocal),
    ("public._sqlx_migrations", Placement::CoordinatorLocal),
];

fn placement(table: &str) -> Option<Placement> {
    PLACEMENTS
        .iter()
        .find(|(name, _)| *name == table)
        .map(|(_, placement)| *placement)
}

fn distribution_column(table: &str) -> Option<&'static str> {
    match placement(&format!("public.{table}"))? {
        Placement::Colocated(column) | Placement::OwnKey(column) => Some(column),
        Placement::Reference | Placement::CoordinatorLocal => None,
    }
}

/// A key of a table, as the catalog has it.
#[derive(Debug, sqlx::FromRow)]
struct Key {
    table_name: String,
    key_name: String,
    /// `unique`, `primary` or `foreign`.
    kind: String,
    columns: Vec<String>,
    /// For a foreign key: the referenced table and its columns.
    referenced: Option<String>,
    referenced_columns: Option<Vec<String>>,
}

/// Every unique index (primary keys included) and foreign key of the schemas.
async fn keys(db: &mut PgConnection) -> Vec<Key> {
    sqlx::query_as(
        "SELECT i.indrelid::regclass::text AS table_name, c.relname::text AS key_name,
                CASE WHEN i.indisprimary THEN 'primary' ELSE 'unique' END AS kind,
                array(SELECT a.attname::text FROM unnest(i.indkey) AS k(attnum)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
                    AS columns,
                NULL::text AS referenced, NULL::text[] AS referenced_columns
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE i.indisunique AND n.nspname IN ('public', 'opreg_sql')
         UNION ALL
         SELECT f.conrelid::regclass::text, f.conname::text, 'foreign',
                array(SELECT a.attname::text FROM unnest(f.conkey) AS k(attnum)
                      JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.attnum),
                f.confrelid::regclass::text,
                array(SELECT a.attname::text FROM unnest(f.confkey) AS k(attnum)
                      JOIN pg_attribute a ON a.attrelid = f.confrelid AND a.attnum = k.attnum)
         FROM pg_constraint f JOIN pg_namespace n ON n.oid = f.connamespace
         WHERE f.contype = 'f' AND n.nspname IN ('public', 'opreg_sql')
         ORDER BY 1, 2",
    )
    .fetch_all(db)
    .await
    .unwrap()
}

/// Every table of the registry's schemas, schema-qualified.
async fn tables(db: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p') AND n.nspname IN ('public', 'opreg_sql')
         ORDER BY 1",
    )
    .fetch_all(db)
    .await
    .unwrap()
}

fn qualified(table: &str) -> String {
    if table.contains('.') {
        table.to_owned()
    } else {
        format!("public.{table}")
    }
}

/// What Citus would refuse, or not enforce, in these keys and tables.
fn placement_problems(tables: &[String], keys: &[Key]) -> Vec<String> {
    let mut problems: Vec<String> = tables
        .iter()
        .filter(|table| placement(table).is_none())
        .map(|table| format!("{table} is not placed (PLACEMENTS, deploy/citus/README.md)"))
        .collect();
    for key in keys {
        let table = qualified(&key.table_name);
        let source = placement(&table);
        if let Some(Placement::Colocated(column) | Placement::OwnKey(column)) = source
            && !key.columns.iter().any(|c| c == column)
        {
            problems.push(format!(
                "{table}: {} key {} ({}) lacks the distribution column {column}",
                key.kind,
                key.key_name,
                key.columns.join(", ")
            ));
        }
        let (Some(referenced), Some(referenced_columns)) =
            (&key.referenced, &key.referenced_columns)
        else {
            continue;
        };
        // Citus allows a foreign key between colocated tables on their
        // distribution column, to a reference table, and between tables on
        // the coordinator; nothing that points into a distributed table from
        // outside its colocation group.
        let target = qualified(referenced);
        let joined_on_key = match (source, placement(&target)) {
            (Some(Placement::Colocated(from)), Some(Placement::Colocated(to))) => key
                .columns
                .iter()
                .zip(referenced_columns)
                .any(|(column, referenced)| column == from && referenced == to),
            _ => false,
        };
        let to_reference = placement(&target) == Some(Placement::Reference);
        let between_local = source == Some(Placement::CoordinatorLocal)
            && placement(&target) == Some(Placement::CoordinatorLocal);
        if !(joined_on_key || to_reference || between_local) {
            problems.push(format!(
                "{table}: foreign key {} to {target} is neither between colocated tables on \
                 their distribution column nor to a reference table",
                key.key_name
            ));
        }
    }
    problems
}

// --- the statements the server runs ---------------------------------------

/// How many shards a statement reaches on Citus.
#[derive(Debug, PartialEq)]
enum Reach {
    /// It touches no distributed table.
    NoShard,
    /// Each distributed table it reads or writes is reached through its
    /// distribution column: one shard for each key it names.
    OneShardPerKey,
    /// These references to distributed tables do not name the distribution
    /// column: the statement reaches every shard.
    AllShards(Vec<String>),
}

/// A table named in a statement, with the word before it (`from`, `join`,
/// `update`, `insert into`, `merge into`, `using`, or a comma of a FROM
/// list), schema-qualified or not.
static TABLE_REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(\binsert\s+into|\bmerge\s+into|\bfrom|\bjoin|\bupdate|\busing|,)\s+(?:public\.)?"?(operations|execution_history|executions|audit_entries|resources)\b"?(\.?)"#,
    )
    .unwrap()
});

/// Where a common table expression ends and the next, or the main
/// statement, begins: a predicate past it belongs to another part.
static PART_EDGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\)\s*(,\s*\w+\s+as\s+(not\s+)?(materialized\s+)?\(|(select|update|delete|insert|merge)\b)",
    )
    .unwrap()
});

/// Column names bound to rows of parameters: `unnest($1, …) … AS w(a, b, …)`.
static UNNEST_COLUMNS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"unnest\s*\(\s*\$\d[^;]*?\bas\s+\w+\s*\(([^)]*)\)").unwrap());

/// A column renamed: `o.operation_key AS r_key`.
static ALIAS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:\w+\.)?(\w+)\s+as\s+(\w+)").unwrap());

/// Where a predicate may start: after WHERE or a join's ON.
static CONDITION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(where|on)\b").unwrap());

/// The names that carry `column`'s value in `text`: the column itself, the
/// unnested parameter columns named for it (`w_key` for `operation_key`,
/// `w_resource` for `resource`), and any renaming of one of those.
fn carriers(text: &str, column: &str) -> Vec<String> {
    let suffix = if column == "operation_key" {
        "key"
    } else {
        column
    };
    let mut names: Vec<String> = UNNEST_COLUMNS
        .captures_iter(text)
        .flat_map(|captures| {
            captures[1]
                .split(',')
                .map(|name| name.trim().to_owned())
                .filter(|name| name.ends_with(suffix))
                .collect::<Vec<_>>()
        })
        .collect();
    names.push(column.to_owned());
    for alias in ALIAS.captures_iter(text) {
        if names.iter().any(|name| name == &alias[1]) {
            names.push(alias[2].to_owned());
        }
    }
    names.retain(|name| name != column);
    names
}

/// Where `statement` goes on Citus. After each reference to a distributed
/// table, within its part of the statement (up to the next reference or the
/// end of its common table expression), a WHERE or ON must compare its
/// distribution column with a parameter, any of an array parameter, a
/// parameter column unnested for that column, or a renamed distribution
/// column (whose own reference is checked in turn). An INSERT's rows carry
/// their own key; everything else that names a distributed table counts.
fn reach(statement: &str) -> Reach {
    let text = statement.to_lowercase();
    let references: Vec<(usize, String, String)> = TABLE_REFERENCE
        .captures_iter(&text)
        .filter(|c| c[3].is_empty())
        .map(|c| (c.get(0).unwrap().start(), c[1].to_owned(), c[2].to_owned()))
        .collect();
    if references.is_empty() {
        return Reach::NoShard;
    }
    let mut unkeyed = Vec::new();
    for (index, (start, verb, table)) in references.iter().enumerate() {
        if verb.starts_with("insert") {
            continue;
        }
        let next_reference = references.get(index + 1).map_or(text.len(), |next| next.0);
        let part_end = PART_EDGE
            .find_at(&text, *start)
            .map_or(text.len(), |edge| edge.start());
        let segment = &text[*start..next_reference.min(part_end)];
        let column = match table.as_str() {
            "executions" => "operation_key",
            other => distribution_column(other).expect("a distributed table"),
        };
        let carried = carriers(&text, column);
        let predicate = Regex::new(&format!(
            r"\b{column}\s*=\s*(\$\d+|any\s*\(\s*\$\d+|(\w+\.)?(\w+))"
        ))
        .unwrap();
        let conditions = CONDITION
            .find(segment)
            .map_or("", |c| &segment[c.start()..]);
        let keyed = predicate.captures_iter(conditions).any(|c| {
            c.get(3)
                .is_none_or(|name| carried.iter().any(|carrier| carrier == name.as_str()))
        });
        if !keyed {
            unkeyed.push(format!("{verb} {table}"));
        }
    }
    if unkeyed.is_empty() {
        Reach::OneShardPerKey
    } else {
        Reach::AllShards(unkeyed)
    }
}

/// Whether statements are being kept, and for which call.
static RECORDING: AtomicBool = AtomicBool::new(false);
static CALL: Mutex<&str> = Mutex::new("");
/// Each statement the server ran, whitespace folded, and the calls that ran it.
static STATEMENTS: Mutex<BTreeMap<String, BTreeSet<&'static str>>> = Mutex::new(BTreeMap::new());

/// Keeps the statements sqlx logs (target `sqlx::query`) while recording.
struct StatementLog;

#[derive(Default)]
struct StatementText {
    summary: String,
    statement: String,
}

impl tracing::field::Visit for StatementText {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.statement = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &tracing::field::Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementLog {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" || !RECORDING.load(Ordering::SeqCst) {
            return;
        }
        let mut text = StatementText::default();
        event.record(&mut text);
        // sqlx leaves the statement empty when its summary is the whole of it.
        let whole = if text.statement.trim().is_empty() {
            text.summary
        } else {
            text.statement
        };
        // Comments dropped (they may name tables), whitespace folded.
        let folded = whole
            .lines()
            .map(|line| line.split("--").next().unwrap_or_default())
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ");
        let call = *CALL.lock().unwrap();
        STATEMENTS
            .lock()
            .unwrap()
            .entry(folded)
            .or_default()
            .insert(call);
    }
}

/// Runs `call`, keeping the statements the server runs meanwhile under `name`.
async fn recorded<T>(name: &'static str, call: impl Future<Output = T>) -> T {
    *CALL.lock().unwrap() = name;
    RECORDING.store(true, Ordering::SeqCst);
    let answer = call.await;
    RECORDING.store(false, Ordering::SeqCst);
    answer
}

/// The calls of the hot path; the others (ClaimDue, the admin's) are listed.
const HOT_PATH: &[&str] = &[
    "Claim: new key",
    "Claim: in progress",
    "Claim: conflict",
    "Claim: replay",
    "Claim: retry",
    "Claim: takeover",
    "Claim: reconcile",
    "Claim: exhausted",
    "Claim: compensation",
    "Claim: reuse",
    "Claim: waiting",
    "Complete: success",
    "Complete: failure",
    "Complete: retryable",
    "Complete: unknown",
    "Complete: again",
    "Renew",
    "FencedWrite",
    "GetResource",
    "Lookup",
    "BatchClaim",
    "BatchComplete",
];

fn claim_of(key: &str, owner: &str, amount: i64) -> pb::ClaimRequest {
    claim_request(NS, key, owner, json!({ "amount": amount }))
}

/// Every hot-path call in each of its forms, then ClaimDue and an admin action.
async fn run_every_call(app: &TestApp) {
    let mut client = app.client.clone();
    let claimer = app.client.clone();
    let claim = move |request| {
        let mut client = claimer.clone();
        async move { client.claim(request).await.map(tonic::Response::into_inner) }
    };
    let first = recorded("Claim: new key", claim(claim_of("k1", "w1", 1)))
        .await
        .unwrap();
    recorded("Claim: in progress", claim(claim_of("k1", "w2", 1)))
        .await
        .unwrap();
    let mut waiting = claim_of("k1", "w2", 1);
    waiting.wait = Some(prost_types::Duration {
        seconds: 0,
        nanos: 200_000_000,
    });
    recorded("Claim: waiting", claim(waiting)).await.unwrap();
    recorded("Claim: conflict", claim(claim_of("k1", "w2", 2)))
        .await
        .unwrap_err();
    recorded(
        "Renew",
        client.renew(renew_request(NS, "k1", "w1", token(&first))),
    )
    .await
    .unwrap();
    recorded(
        "FencedWrite",
        client.fenced_write(write_request(NS, "k1", token(&first), b"v1")),
    )
    .await
    .unwrap();
    recorded(
        "GetResource",
        client.get_resource(pb::GetResourceRequest {
            namespace: NS.into(),
            resource: "account:1".into(),
        }),
    )
    .await
    .unwrap();
    let done = complete_request(NS, "k1", token(&first), success(b"ok"));
    recorded("Complete: success", client.complete(done.clone()))
        .await
        .unwrap();
    recorded("Complete: again", client.complete(done))
        .await
        .unwrap();
    recorded("Claim: replay", claim(claim_of("k1", "w3", 1)))
        .await
        .unwrap();
    recorded("Lookup", client.lookup(lookup_request(NS, "k1")))
        .await
        .unwrap();

    let failing = claim(claim_of("k2", "w1", 1)).await.unwrap();
    let failure = pb::complete_request::Outcome::Failure(pb::Failure {
        code: "declined".into(),
        message: "card declined".into(),
    });
    recorded(
        "Complete: failure",
        client.complete(complete_request(NS, "k2", token(&failing), failure)),
    )
    .await
    .unwrap();

    let mut again = claim_of("k2", "w2", 1);
    again.reuse = pb::ReusePolicy::AfterFailure.into();
    recorded("Claim: reuse", claim(again)).await.unwrap();

    let retried = claim(claim_of("k3", "w1", 1)).await.unwrap();
    recorded(
        "Complete: retryable",
        client.complete(complete_request(NS, "k3", token(&retried), retryable(None))),
    )
    .await
    .unwrap();
    app.make_retry_due(NS, "k3").await;
    recorded("Claim: retry", claim(claim_of("k3", "w2", 1)))
        .await
        .unwrap();

    claim(claim_of("k4", "w1", 1)).await.unwrap();
    app.expire_lease(NS, "k4").await;
    recorded("Claim: takeover", claim(claim_of("k4", "w2", 1)))
        .await
        .unwrap();

    let uncertain = claim(claim_of("k5", "w1", 1)).await.unwrap();
    recorded(
        "Complete: unknown",
        client.complete(complete_request(
            NS,
            "k5",
            token(&uncertain),
            unknown("psp-1"),
        )),
    )
    .await
    .unwrap();
    recorded("Claim: reconcile", claim(claim_of("k5", "w2", 1)))
        .await
        .unwrap();

    // A due retry past its deadline: the Claim exhausts it (DEAD).
    let late = claim(claim_of("k6", "w1", 1)).await.unwrap();
    client
        .complete(complete_request(NS, "k6", token(&late), retryable(None)))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE operations SET next_attempt_at = clock_timestamp() - interval '2 ms',
                               deadline_at = clock_timestamp() - interval '1 ms'
         WHERE namespace = $1 AND operation_key = 'k6'",
    )
    .bind(NS)
    .execute(&app.db)
    .await
    .unwrap();
    let exhausted = recorded("Claim: exhausted", claim(claim_of("k6", "w2", 1)))
        .await
        .unwrap();
    assert_eq!(outcome(&exhausted), pb::ClaimOutcome::Dead);

    let mut compensation = claim_of("k1:undo", "w1", 1);
    compensation.compensates = "k1".into();
    recorded("Claim: compensation", claim(compensation))
        .await
        .unwrap();

    let claims = (0..4)
        .map(|i| claim_of(&format!("b{i}"), "w1", i))
        .collect();
    let batch = recorded(
        "BatchClaim",
        client.batch_claim(pb::BatchClaimRequest { claims }),
    )
    .await
    .unwrap()
    .into_inner();
    let completions = batch
        .results
        .iter()
        .enumerate()
        .map(|(i, result)| {
            let Some(pb::batch_claim_result::Result::Claim(answer)) = &result.result else {
                panic!("a claim answer: {result:?}");
            };
            complete_request(NS, &format!("b{i}"), token(answer), success(b"ok"))
        })
        .collect();
    recorded(
        "BatchComplete",
        client.batch_complete(pb::BatchCompleteRequest { completions }),
    )
    .await
    .unwrap();

    let due = claim(claim_of("k7", "w1", 1)).await.unwrap();
    client
        .complete(complete_request(NS, "k7", token(&due), retryable(None)))
        .await
        .unwrap();
    app.make_retry_due(NS, "k7").await;
    let pulled = recorded("ClaimDue", claim_due(&mut client, NS, "puller", 10)).await;
    assert_eq!(pulled.len(), 1, "the due retry is pulled");
}

fn install_statement_log() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(StatementLog))
            .expect("no other subscriber in this test binary");
    });
}

/// The tests that reach a database run one at a time: the statement log
/// keeps whatever any of this binary's connections runs while it records.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_hot_path_names_the_distribution_column_of_every_table_it_touches() {
    let _alone = ONE_AT_A_TIME.lock().await;
    install_statement_log();
    let app = spawn_app_with(|config| {
        // Background statements may reach every shard; they keep out of the
        // recording windows.
        config.lifecycle.maintenance_interval = Duration::from_secs(3600);
        config.telemetry.gauge_refresh_interval = Duration::from_secs(3600);
    })
    .await;
    // Their first passes run at start: let them finish before recording.
    for _ in 0..100 {
        let scraped = scrape(app.metrics_addr).await;
        if scraped.value("opreg_maintenance_last_run_timestamp_seconds", &[]) > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    run_every_call(&app).await;

    let statements = STATEMENTS.lock().unwrap().clone();
    let ran: BTreeSet<&str> = statements.values().flatten().copied().collect();
    for call in HOT_PATH {
        assert!(
            ran.contains(call) || *call == "Claim: replay",
            "{call} ran no statement: the workload no longer reaches it"
        );
    }
    let mut listing = String::new();
    let mut violations = Vec::new();
    for (statement, calls) in &statements {
        let reach = reach(statement);
        let hot = calls.iter().any(|call| HOT_PATH.contains(call));
        let calls: Vec<&str> = calls.iter().copied().collect();
        let shown: String = statement.chars().take(160).collect();
        listing.push_str(&format!("{reach:?} [{}]\n    {shown}\n", calls.join(", ")));
        if hot && matches!(reach, Reach::AllShards(_)) {
            violations.push(format!("{reach:?} [{}]: {statement}", calls.join(", ")));
        }
    }
    println!("every statement the calls ran, and its reach on Citus:\n{listing}");
    assert!(
        statements.len() >= 10,
        "the statement log is read: {listing}"
    );
    assert!(
        violations.is_empty(),
        "hot-path statements without the distribution column:\n{}",
        violations.join("\n")
    );
}

#[tokio::test]
async fn every_key_of_a_distributed_table_includes_its_distribution_column() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let options: PgConnectOptions = fresh_database().await;
    let mut db = PgConnection::connect_with(&options).await.unwrap();
    opreg_server::store::MIGRATOR.run(&mut db).await.unwrap();
    let problems = placement_problems(&tables(&mut db).await, &keys(&mut db).await);
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The check catches what it is for: a unique key across operations, a
    // foreign key off the distribution column, and a table nobody placed.
    sqlx::raw_sql(
        "CREATE UNIQUE INDEX planted_one_compensation ON operations (namespace, compensates);
         ALTER TABLE audit_entries ADD CONSTRAINT planted_by_compensation
             FOREIGN KEY (namespace, operator) REFERENCES operations (namespace, compensates);
         ALTER TABLE leader_leases ADD CONSTRAINT planted_from_reference
             FOREIGN KEY (holder, role) REFERENCES operations (namespace, operation_key);
         CREATE TABLE planted_notes (namespace text, operation_key text, note text,
             FOREIGN KEY (namespace, operation_key) REFERENCES operations)",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let problems = placement_problems(&tables(&mut db).await, &keys(&mut db).await);
    let found = problems.join("\n");
    assert!(found.contains("planted_one_compensation"), "{found}");
    assert!(found.contains("planted_by_compensation"), "{found}");
    assert!(found.contains("planted_from_reference"), "{found}");
    assert!(
        found.contains("public.planted_notes is not placed"),
        "{found}"
    );
}

/// The placements deploy/citus/distribute.sql makes, as (table, placement).
fn placements_in_distribute_sql() -> Vec<(String, Placement)> {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/citus/distribute.sql"
    ))
    .unwrap();
    let call = Regex::new(
        r"(?m)^SELECT (create_distributed_table|create_reference_table|citus_add_local_table_to_metadata)\('([\w.]+)'(?:, '(\w+)')?(?:, colocate_with => '(\w+)')?\);",
    )
    .unwrap();
    call.captures_iter(&script)
        .map(|c| {
            let table = qualified(&c[2]);
            let placement = match (&c[1], c.get(3), c.get(4).map(|m| m.as_str())) {
                ("create_reference_table", _, _) => Placement::Reference,
                ("citus_add_local_table_to_metadata", _, _) => Placement::CoordinatorLocal,
                (_, Some(column), Some("none")) => Placement::OwnKey(leak(column.as_str())),
                (_, Some(column), _) => Placement::Colocated(leak(column.as_str())),
                other => panic!("unexpected call in distribute.sql: {other:?}"),
            };
            (table, placement)
        })
        .collect()
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

#[test]
fn distribute_sql_places_every_table_as_the_check_does() {
    let mut script = placements_in_distribute_sql();
    script.sort_by(|a, b| a.0.cmp(&b.0));
    let mut checked: Vec<(String, Placement)> = PLACEMENTS
        .iter()
        .map(|(table, placement)| ((*table).to_owned(), *placement))
        .collect();
    checked.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(script, checked);
}

#[test]
fn reach_tells_a_keyed_statement_from_one_that_scans_every_shard() {
    use Reach::*;
    let keyed = [
        "SELECT status FROM operations WHERE namespace = $1 AND operation_key = $2",
        "UPDATE operations AS o SET status = 'dead' WHERE o.namespace = $1 AND o.operation_key = ANY($2)",
        "WITH w AS (SELECT * FROM unnest($1::text[], $2::text[]) AS w(w_namespace, w_key)) \
         SELECT * FROM w CROSS JOIN LATERAL (SELECT * FROM operations \
         WHERE namespace = w_namespace AND operation_key = w_key LIMIT 1) AS found",
        "INSERT INTO execution_history (namespace, operation_key) SELECT $1, $2",
        "UPDATE resources SET fence = $3 WHERE namespace = $1 AND resource = $2",
    ];
    for statement in keyed {
        assert_eq!(reach(statement), OneShardPerKey, "{statement}");
    }
    assert_eq!(reach("SELECT 1"), NoShard);
    let planted = [
        (
            "SELECT count(*) FROM operations WHERE namespace = $1",
            "from operations",
        ),
        (
            "SELECT * FROM operations o JOIN execution_history h \
             ON h.operation_key = o.operation_key WHERE o.namespace = $1",
            "from operations",
        ),
        (
            "UPDATE operations SET status = 'dead' WHERE operation_key = $1; \
             DELETE FROM audit_entries WHERE namespace = $2",
            "from audit_entries",
        ),
        (
            "SELECT * FROM resources WHERE namespace = $1",
            "from resources",
        ),
        // A comma join, USING, MERGE and a qualified name are references too.
        (
            "SELECT * FROM unnest($1::text[]) AS w(w_key), operations o WHERE o.namespace = $2",
            ", operations",
        ),
        (
            "DELETE FROM console_jobs USING audit_entries a WHERE a.namespace = $1",
            "using audit_entries",
        ),
        (
            "MERGE INTO operations o USING (SELECT $1 AS k) s ON o.namespace = s.k \
             WHEN MATCHED THEN DELETE",
            "merge into operations",
        ),
        (
            "SELECT * FROM public.operations WHERE namespace = $1",
            "from operations",
        ),
        // The key compared with another parameter column than its own.
        (
            "SELECT * FROM unnest($1::text[], $2::text[]) AS w(w_namespace, w_key) \
             CROSS JOIN LATERAL (SELECT * FROM operations \
             WHERE namespace = w_namespace AND operation_key = w_namespace) AS o",
            "from operations",
        ),
        // The key only assigned, never compared.
        (
            "UPDATE operations SET operation_key = $1 WHERE namespace = $2",
            "update operations",
        ),
        // The key compared in a later part of the statement, not this one.
        (
            "WITH scanned AS (SELECT * FROM operations WHERE namespace = $1), \
             keyed AS (SELECT * FROM scanned WHERE operation_key = $2) SELECT * FROM keyed",
            "from operations",
        ),
    ];
    for (statement, unkeyed) in planted {
        match reach(statement) {
            AllShards(found) => {
                assert!(found.iter().any(|f| f == unkeyed), "{statement}: {found:?}")
            }
            other => panic!("{statement}: {other:?}"),
        }
    }
}
