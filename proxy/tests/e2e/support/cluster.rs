//! What an in-process cluster node says of itself: its `Cluster`, whether it limits alone,
//! its Redis errors and sync rounds, and waits on them.

use tollgate::server::Server;

/// The node's cluster.
///
/// # Panics
/// If the server has no `[cluster]`.
pub(crate) fn cluster_of(server: &Server) -> &tollgate::cluster::Cluster {
    server
        .shared()
        .cluster()
        .map(AsRef::as_ref)
        .expect("a cluster node")
}

/// Whether the node limits alone (Redis away).
pub(crate) fn alone(server: &Server) -> bool {
    cluster_of(server).metrics().alone.get() == 1
}

/// The node's Redis errors so far.
pub(crate) fn errors(server: &Server) -> u64 {
    cluster_of(server).metrics().redis_errors.get()
}

/// The node's finished sync rounds so far.
pub(crate) fn syncs(server: &Server) -> u64 {
    cluster_of(server).metrics().syncs.get()
}

/// Waits until every node has finished two more sync rounds (so the first began after now).
pub(crate) async fn two_rounds(servers: &[Server]) {
    let before: Vec<u64> = servers.iter().map(syncs).collect();
    super::eventually(|| servers.iter().zip(&before).all(|(s, b)| syncs(s) >= b + 2)).await;
}

/// Waits until no node limits alone.
pub(crate) async fn joined(servers: &[Server]) {
    super::eventually(|| servers.iter().all(|s| !alone(s))).await;
}
