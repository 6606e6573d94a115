//! Operating the host: metrics with controller-runtime's names, and the health,
//! readiness and metrics endpoints.

pub mod health;
pub mod metrics;
pub mod server;
