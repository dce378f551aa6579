//! UDP forwarding: 64-byte datagrams from a few client sockets (each its own source, so its
//! own proxy session) for a fixed time, counted where they land, at the UDP sink.
//!
//! The sender is windowed: at most `udp_window` datagrams sent and not yet seen by the sink.
//! An unpaced sender on a loopback with two cores mostly measures the receive queue
//! overflowing (and takes the proxy's core to do it); the window measures forwarding. A
//! datagram lost anyway would hold its window slot forever, so when the sink sees nothing for
//! [`STALL`] the slots in flight are written off as lost and sending resumes.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use tollgate_benches::upstream::Upstreams;

use super::{Context, Outcome, micros_per, with_cpu};
use crate::peers::Peer;
use crate::report::Metric;

/// The datagram.
const PAYLOAD: [u8; 64] = [b'u'; 64];
/// No progress at the sink for this long: what is in flight is lost.
const STALL: Duration = Duration::from_millis(20);
/// After the sending time, how long stragglers may take to arrive.
const SETTLE: Duration = Duration::from_millis(200);
/// Datagrams sent in one go when the window has room.
const BURST: u64 = 16;

/// Datagrams sent and forwarded per second, and proxy CPU per forwarded datagram.
pub(super) fn run(peer: &Peer, context: &Context<'_>) -> Result<Outcome, String> {
    let sizes = context.sizes;
    let target = peer
        .endpoints
        .udp
        .ok_or_else(|| "no UDP endpoint".to_owned())?;
    let clients = clients(sizes.udp_clients, target).map_err(|e| format!("UDP clients: {e}"))?;
    warm_up(&clients, context.upstreams)?;
    let (counts, cpu) = with_cpu(peer, || {
        send(
            &clients,
            context.upstreams,
            sizes.udp_time,
            sizes.udp_window,
        )
    })?;
    let secs = sizes.udp_time.as_secs_f64();
    let mut outcome = Outcome::default();
    outcome
        .figures
        .push((Metric::UdpSent, counts.sent as f64 / secs));
    outcome
        .figures
        .push((Metric::UdpForwarded, counts.forwarded as f64 / secs));
    if let Some(cpu) = cpu {
        outcome
            .figures
            .push((Metric::UdpCpu, micros_per(cpu, counts.forwarded)));
    }
    let lost = counts.sent.saturating_sub(counts.arrived);
    if lost > 0 || counts.errors > 0 {
        outcome.notes.push(format!(
            "udp: {lost} of {} datagrams lost, {} send errors",
            counts.sent, counts.errors
        ));
    }
    Ok(outcome)
}

/// Client sockets from 127.4.0.1, 127.4.0.2, ..., connected to `target`.
fn clients(count: usize, target: SocketAddr) -> io::Result<Vec<UdpSocket>> {
    (0..count)
        .map(|i| {
            let last = u8::try_from(i + 1).unwrap_or(u8::MAX);
            let socket = UdpSocket::bind(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(127, 4, 0, last)),
                0,
            ))?;
            socket.connect(target)?;
            Ok(socket)
        })
        .collect()
}

/// One datagram per client, until all arrive (the proxy has opened every session) or 2 s pass.
fn warm_up(clients: &[UdpSocket], upstreams: &Upstreams) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let want = clients.len() as u64;
    for _ in 0..5 {
        let before = upstreams.datagrams();
        for client in clients {
            let _ = client.send(&PAYLOAD);
        }
        let attempt = (Instant::now() + Duration::from_millis(400)).min(deadline);
        while Instant::now() < attempt {
            if upstreams.datagrams() - before >= want {
                thread::sleep(Duration::from_millis(10));
                return Ok(());
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
    Err("UDP: warm-up datagrams did not reach the sink".to_owned())
}

#[derive(Debug, Default)]
struct Counts {
    sent: u64,
    errors: u64,
    /// Seen by the sink by the end of the sending time.
    forwarded: u64,
    /// Seen by the sink after the settling time.
    arrived: u64,
}

/// Sends for `time`, round-robin over the clients, keeping at most `window` in flight.
fn send(clients: &[UdpSocket], upstreams: &Upstreams, time: Duration, window: u64) -> Counts {
    let base = upstreams.datagrams();
    let start = Instant::now();
    let end = start + time;
    let mut counts = Counts::default();
    let mut written_off = 0u64;
    let mut last_seen = (0u64, start);
    let mut next = 0usize;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let seen = upstreams.datagrams() - base;
        let in_flight = counts.sent.saturating_sub(seen + written_off);
        if in_flight < window {
            for _ in 0..(window - in_flight).min(BURST) {
                match clients[next].send(&PAYLOAD) {
                    Ok(_) => counts.sent += 1,
                    Err(_) => counts.errors += 1,
                }
                next = (next + 1) % clients.len();
            }
            continue;
        }
        if seen != last_seen.0 {
            last_seen = (seen, now);
        } else if now - last_seen.1 >= STALL {
            written_off += in_flight;
            last_seen = (seen, now);
        }
        thread::yield_now();
    }
    counts.forwarded = upstreams.datagrams() - base;
    thread::sleep(SETTLE);
    counts.arrived = upstreams.datagrams() - base;
    counts
}
