//! BatchClaim and BatchComplete: the caller is read once and each namespace
//! authorized once, every item is validated in one pass (each still takes its
//! own token from its namespace's rate limit), and the admitted items go to
//! the registry together, so a batch's new keys share registration
//! statements and its reports recording statements. Each item is answered as
//! its unary call would answer it, in request order; a refusal is the item's
//! own `google.rpc.Status` with its ErrorInfo.

use prost::Message;
use tonic::Status;

use super::{Gate, Marks};
use crate::domain::error::RegistryError;

/// Most items one batch call carries.
pub const MAX_ITEMS: usize = 1000;

/// Most bytes one batch call carries, whatever its items' own limits allow.
pub const MAX_BYTES: usize = 16 << 20;

/// The items of one batch call that passed the gate and validation, and
/// where each item's answer goes.
pub struct Admitted<C> {
    commands: Vec<C>,
    /// Per item in request order: its command's index, or its refusal.
    slots: Vec<Result<usize, Status>>,
}

impl<C> Admitted<C> {
    /// Admits and converts each item of `items` (named `field`) in request
    /// order. An empty batch or one over [`MAX_ITEMS`] is refused whole,
    /// before any item is looked at.
    pub fn each<I>(
        (field, items): (&'static str, Vec<I>),
        mut admit: impl FnMut(I) -> Result<C, Status>,
    ) -> Result<Self, Status> {
        check_length(field, items.len())?;
        let mut admitted = Self {
            commands: Vec::with_capacity(items.len()),
            slots: Vec::with_capacity(items.len()),
        };
        for item in items {
            let slot = admit(item).map(|command| {
                admitted.commands.push(command);
                admitted.commands.len() - 1
            });
            admitted.slots.push(slot);
        }
        Ok(admitted)
    }

    pub fn commands(&self) -> &[C] {
        &self.commands
    }

    /// Every item's result in request order: `answers` (one per command, in
    /// their order) made responses by `answered`, refusals by `refused`.
    pub fn answer<A, T, R>(
        self,
        answers: Vec<A>,
        mut answered: impl FnMut(&C, A) -> Result<T, Status>,
        item: impl Fn(T) -> R,
        refused: impl Fn(tonic_types::pb::Status) -> R,
    ) -> Vec<R> {
        let mut answers: Vec<Option<A>> = answers.into_iter().map(Some).collect();
        self.slots
            .into_iter()
            .map(|slot| {
                let response = slot.and_then(|index| match answers[index].take() {
                    Some(answer) => answered(&self.commands[index], answer),
                    None => Err(super::status::to_status(&RegistryError::Internal)),
                });
                match response {
                    Ok(response) => item(response),
                    Err(status) => refused(item_status(&status)),
                }
            })
            .collect()
    }
}

/// [`Gate`] for the items of one batch call: the caller is read once and each
/// namespace authorized once (a refusal is decided, counted and logged again
/// for each of its items); every item takes its own rate-limit token.
pub struct BatchGate<'a> {
    gate: &'a Gate,
    marks: Marks<'a>,
    authorized: Vec<String>,
}

impl<'a> BatchGate<'a> {
    pub fn new(gate: &'a Gate, extensions: &'a tonic::Extensions) -> Self {
        Self {
            gate,
            marks: Marks::of(extensions),
            authorized: Vec::new(),
        }
    }

    pub fn admit(&mut self, namespace: &str) -> Result<(), Status> {
        if !self.authorized.iter().any(|known| known == namespace) {
            self.gate.authorize(self.marks, namespace)?;
            self.authorized.push(namespace.to_owned());
        }
        self.gate.limit(namespace)
    }

    /// The authenticated caller, as the audit names it.
    pub fn principal(&self) -> String {
        self.marks
            .caller
            .map(|caller| caller.name().to_owned())
            .unwrap_or_default()
    }
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
