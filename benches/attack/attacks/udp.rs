//! Spoofed-source UDP as loopback allows it: one datagram each from `udp_sources` distinct
//! addresses (a socket bound to 127.150.x.y and on, used once and closed), rate-bounded.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::time::Instant;
use tollgate_benches::sources::{PER_16, source};

use super::{Tally, paced};
use crate::cli::Sizes;

/// The first /16 of the spoofed sources.
const SPOOF_NET: u8 = 150;
/// What each spoofed datagram carries.
const DATAGRAM: [u8; 32] = [b's'; 32];

/// One datagram from each of `udp_sources` addresses at `udp_rate` per second.
pub(super) async fn spoof(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let started = paced(sizes.udp_sources, sizes.udp_rate, 64, end, |i| {
        let tally = Arc::clone(&tally);
        let net = SPOOF_NET + u8::try_from(i / PER_16).unwrap_or(0);
        let from = source(net, i, PER_16);
        async move {
            Tally::add(&tally.started);
            let sent = async {
                let socket = UdpSocket::bind(SocketAddr::new(from, 0)).await?;
                socket.send_to(&DATAGRAM, target).await
            };
            if sent.await.is_err() {
                Tally::add(&tally.refused);
            }
        }
    })
    .await;
    vec![tally.note(&format!(
        "spoofed UDP from {started} sources (\"refused\" = could not send)"
    ))]
}
