//! The replica's background readers of the store, above it and above
//! [`crate::telemetry`]: the health probe ([`health`]), which also decides
//! whether calls fail fast, and the backlog gauges ([`gauges`]). Each keeps a
//! connection of its own, so a busy pool cannot blind them.

pub mod gauges;
pub mod health;
