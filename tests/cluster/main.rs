//! Tests against the project's own control plane (real kube-apiserver and etcd, with the
//! controller-manager and kwok's node where they need them): the plane itself, `capstan
//! run` end to end, rollout, admission, trust and writes, the registry and signatures,
//! replicas under faults, and the chart installed. One test binary, one module per area
//! (`cargo test --test cluster -- faults::`).

mod admission;
mod contract;
mod embed;
mod faults;
mod ha;
mod helm_dry_run;
mod helm_install;
mod informers;
mod metacontroller;
mod monitoring;
mod parity;
mod plane;
mod registry;
mod rollout;
mod run;
mod shard;
mod sharding;
mod signing;
mod trust;
mod tutorial;
mod writes;
