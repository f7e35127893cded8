//! What wraps the RPC handlers, outside in: the connections ([`incoming`]:
//! bounded, TLS, client certificates), the edge of every call ([`edge`]:
//! message sizes, concurrency, deadlines), authentication before a message
//! is decoded ([`authenticate`]), and the per-namespace rate limits that the
//! handlers' gate applies ([`rate_limit`]). Nothing here knows an RPC's
//! meaning; [`crate::grpc`] does.

pub mod authenticate;
pub mod edge;
pub mod incoming;
pub mod rate_limit;

pub use authenticate::AuthenticateLayer;
pub use edge::{EdgeLayer, InFlight, MessageLimits, StopsAt};
pub use incoming::{ConnectionInfo, ConnectionLimits, Incoming};
pub use rate_limit::RateLimits;
