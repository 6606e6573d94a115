//! Operating the host: metrics with controller-runtime's names, and the health,
//! readiness and metrics endpoints, and giving memory back after bursts.

pub(crate) mod health;
pub(crate) mod heap;
pub mod metrics;
pub(crate) mod server;
