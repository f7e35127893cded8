//! BatchClaim and BatchComplete: every item takes the unary path (access,
//! rate limit, validation, the registry, the status table), concurrently, so
//! a batch answers each item exactly as the unary call would, and new keys
//! still share registration statements.

use futures::StreamExt;
use prost::Message;
use tonic::Status;

use crate::domain::error::RegistryError;

/// Most items one batch call carries.
pub const MAX_ITEMS: usize = 1000;

/// Most bytes one batch call carries, whatever its items' own limits allow.
pub const MAX_BYTES: usize = 16 << 20;

/// Claims of one call in flight at once: enough to fill registration
/// statements, which hold one connection for many claims.
pub const CLAIMS_IN_FLIGHT: usize = 256;

/// Completes of one call in flight at once: enough to fill recording
/// statements. A report the statement does not record (a stale token, a
/// repeat) decides on a pooled connection of its own, and one call must not
/// take the whole pool from other callers.
pub const COMPLETES_IN_FLIGHT: usize = 64;

/// Answers `items` with `one`, at most `in_flight` at a time, each answer
/// made a result with `answered` or `refused`, in the items' order. An empty
/// batch or one over [`MAX_ITEMS`] (named `field`) is refused before any item
/// runs.
pub async fn answer_each<I, T, R, F>(
    (field, items): (&'static str, Vec<I>),
    in_flight: usize,
    one: impl FnMut(I) -> F,
    answered: impl Fn(T) -> R,
    refused: impl Fn(tonic_types::pb::Status) -> R,
) -> Result<Vec<R>, Status>
where
    F: Future<Output = Result<T, Status>>,
{
    check_length(field, items.len())?;
    let answers: Vec<Result<T, Status>> = futures::stream::iter(items)
        .map(one)
        .buffered(in_flight)
        .collect()
        .await;
    Ok(answers
        .into_iter()
        .map(|answer| match answer {
            Ok(value) => answered(value),
            Err(status) => refused(item_status(&status)),
        })
        .collect())
}

/// Refuses an empty batch or one over [`MAX_ITEMS`], before any item runs.
fn check_length(field: &'static str, items: usize) -> Result<(), Status> {
    if (1..=MAX_ITEMS).contains(&items) {
        return Ok(());
    }
    Err(super::status::to_status(&RegistryError::invalid(
        field,
        format!("must hold 1 to {MAX_ITEMS} items, not {items}"),
    )))
}

/// An item's status as a `google.rpc.Status`: the status table already
/// encodes one, ErrorInfo included, in the details.
fn item_status(status: &Status) -> tonic_types::pb::Status {
    tonic_types::pb::Status::decode(status.details()).unwrap_or_else(|_| tonic_types::pb::Status {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: Vec::new(),
    })
}
