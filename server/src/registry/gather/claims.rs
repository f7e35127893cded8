//! Ordinary (not compensating) Claims, registered or read together
//! ([`operations::register`]).
//!
//! A batch answers each Claim as if the Claims had run one after another in
//! the batch's order: the first Claim of a key registers it and any later Claim
//! of that key in the same batch observes the row the first one left.

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

use super::Batch;
use crate::domain::commands::ClaimCommand;
use crate::domain::error::Result;
use crate::registry::claim::{Registration, first_answer, fresh_first_lease};
use crate::store::operations::{self, Observed};
use crate::telemetry::metrics;

/// What a gathered Claim learned: registered, or what exists to decide on;
/// `None` for a key a racing registration had inserted but not committed when
/// the statement began (a later statement sees it).
pub(in crate::registry) type Gathered = Option<Registration>;

/// The registration statement's batches.
#[derive(Debug)]
pub(in crate::registry) struct Claims;

impl Batch for Claims {
    type Item = ClaimCommand;
    type Answer = Gathered;

    fn counted(items: usize) {
        metrics::claim_batch(items);
    }

    fn write<'a>(
        db: &'a mut PgConnection,
        items: &'a [&'a ClaimCommand],
    ) -> impl Future<Output = Result<Vec<Result<Gathered>>>> + Send + 'a {
        register_in_order(db, items)
    }
}

/// The statement for the distinct keys, then the answers in sequence: a
/// later claim of a key observes what the first one left.
pub(in crate::registry) async fn register_in_order(
    db: &mut PgConnection,
    claims: &[&ClaimCommand],
) -> Result<Vec<Result<Gathered>>> {
    let mut seen = HashSet::new();
    let distinct: Vec<&ClaimCommand> = claims
        .iter()
        .filter(|claim| seen.insert(claim.identity()))
        .copied()
        .collect();
    let mut found: HashMap<(&str, &str), Option<operations::Registration>> = distinct
        .iter()
        .map(|claim| claim.identity())
        .zip(operations::register(&mut *db, &distinct).await?)
        .collect();
    let mut left: HashMap<(&str, &str), Observed> = HashMap::new();
    let mut answers = Vec::with_capacity(claims.len());
    for claim in claims {
        let key = claim.identity();
        if let Some(observed) = left.get(&key) {
            answers.push(Ok(Some(Registration::Exists(observed.clone()))));
            continue;
        }
        let answer = match found.remove(&key).flatten() {
            None => Ok(None),
            Some(operations::Registration::Existing(observed)) => {
                left.insert(key, observed.clone());
                Ok(Some(Registration::Exists(observed)))
            }
            Some(operations::Registration::Inserted(registered)) => {
                let returned_at = registered.returned_at;
                fresh_first_lease(db, registered, claim)
                    .await
                    .map(|operation| {
                        left.insert(
                            key,
                            Observed {
                                operation: operation.clone(),
                                db_now: returned_at,
                            },
                        );
                        Some(Registration::Registered(first_answer(claim, operation)))
                    })
            }
        };
        answers.push(answer);
    }
    Ok(answers)
}
