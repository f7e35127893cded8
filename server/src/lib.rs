//! opreg: an operation registry. Repeated executions of one business operation
//! converge to one recorded result.
//!
//! Layers, outside in: [`transport`] (connections, limits, authentication,
//! with [`access`]: who may call what) → [`grpc`] (the RPC handlers, which
//! convert at the edge) → [`registry`] (use cases) → [`domain`] (pure rules)
//! and [`store`] (SQL). [`monitor`] reads the store for [`telemetry`] (a
//! leaf); [`app`] wires them. The quick start's PostgreSQL is the
//! `opreg-embedded` crate, behind the `embedded-postgres` feature.

pub mod access;
pub mod app;
pub mod config;
pub mod console;
pub mod domain;
pub mod grpc;
pub mod in_transaction;
pub mod maintenance;
pub mod monitor;
pub mod registry;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod transport;
