//! The reports of current lease holders, recorded together
//! ([`operations::record_outcomes`]).
//!
//! Only reports whose transition depends on nothing stored are gathered (a
//! success, a business failure, an unknown outcome). A report the statement
//! does not record (the token is not the current lease, or it reported
//! already) is answered `None`, and so is a second report of an operation in
//! the same batch: the caller then decides from the stored state, after this
//! batch committed, exactly as if the reports had run one after another.

use std::collections::HashSet;

use sqlx::PgConnection;

use super::Batch;
use crate::domain::commands::CompleteCommand;
use crate::domain::error::Result;
use crate::domain::operation::Operation;
use crate::store::operations::{self, Recording};
use crate::telemetry::metrics;

/// The recorded-outcome statement's batches.
#[derive(Debug)]
pub(in crate::registry) struct Reports;

impl Batch for Reports {
    type Item = CompleteCommand;
    /// The operation as recorded; `None` when nothing was.
    type Answer = Option<Operation>;

    fn counted(items: usize) {
        metrics::complete_batch(items);
    }

    fn write<'a>(
        db: &'a mut PgConnection,
        items: &'a [&'a CompleteCommand],
    ) -> impl Future<Output = Result<Vec<Result<Option<Operation>>>>> + Send + 'a {
        record_first_of_each(db, items)
    }
}

/// One statement for the first settled report of each operation; every other
/// item is answered `None`.
async fn record_first_of_each(
    db: &mut PgConnection,
    commands: &[&CompleteCommand],
) -> Result<Vec<Result<Option<Operation>>>> {
    let mut seen = HashSet::new();
    let firsts: Vec<Option<Recording<'_>>> = commands
        .iter()
        .map(|command| {
            let transition = command.report.settled_transition()?;
            seen.insert(command.identity())
                .then_some((*command, transition))
        })
        .collect();
    let recordings: Vec<Recording<'_>> = firsts.iter().flatten().copied().collect();
    let mut recorded = operations::record_outcomes(db, &recordings)
        .await?
        .into_iter();
    Ok(firsts
        .iter()
        .map(|first| Ok(first.and_then(|_| recorded.next().flatten())))
        .collect())
}
