//! The registry's rules, free of transport and SQL: validated inputs, the
//! state machine, fingerprints, budgets. Everything here is pure.

pub mod admin;
pub mod bulk;
pub mod claim;
pub mod commands;
pub mod complete;
pub mod error;
pub mod ids;
pub mod operation;
pub mod policy;

/// Fingerprints are part of the contract, shared with the clients.
pub use opreg_proto::parameters;
pub mod text;
