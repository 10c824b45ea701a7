//! Networking shared by the rdmadisk userspace target and test client: client allow-lists,
//! TCP framing of the wire messages, a small protocol client, and (feature `rdma`) a safe
//! wrapper over RDMA verbs and rdma_cm.

pub mod allow;
pub mod buf;
pub mod client;
pub mod framing;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod resvport;
