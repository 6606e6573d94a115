//! Operating the host: metrics with controller-runtime's names, and the health,
//! readiness and metrics endpoints, and giving memory back after bursts.

pub mod health;
pub mod heap;
pub mod metrics;
pub mod server;
