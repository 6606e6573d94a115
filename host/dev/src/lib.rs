//! A real Kubernetes control plane on loopback for Capstan's tests and `capstan dev`:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with one fake
//! node, so Jobs run to completion without a kubelet or container runtime — and, when
//! asked, a real node (containerd, runc, CNI, kubelet, kube-proxy) where containers run.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let plane = capstan_dev::Plane::shared().await?;
//! let ns = plane.namespace("echo").await?;
//! let client = plane.client().await?;
//! # let _ = (ns, client); Ok(()) }
//! ```

#![warn(missing_docs)]

mod api;
mod binaries;
mod boot;
mod certs;
mod components;
mod detached;
pub mod image;
mod kubeconfig;
pub mod node;
mod outage;
mod plane;
mod process;
mod starter;

pub use api::FAKE_NODE;
pub use binaries::{Binaries, Versions, cache_root};
pub use components::PortMap;
pub use detached::{DetachedProcess, DetachedState, default_dev_dir};
pub use plane::{EXTERNAL_KUBECONFIG_ENV, Plane, PlaneConfig};
