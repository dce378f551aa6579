//! The program's drop events, read from its ring buffer and fed where a refusal of the proxy
//! goes: the offender list (so `/top` names sources the kernel dropped), the rejection log
//! within its budget, and `tollgate_xdp_drop_events_total`.
//!
//! What an attacker can make them cost is bounded in the kernel: an event is written for a
//! key over its limit at most once per window (a slot of 4,096, chosen by the key's hash,
//! holds the window it last reported; two keys on one slot share one event), into a ring of
//! `EVENT_RING_BYTES`; an event the ring has no room for is counted in a per-CPU counter
//! (`tollgate_xdp_drop_events_lost_total`), never waited for. So a flood of one /64 makes one
//! event per window, whatever its rate, and the events of a window number at most the slots.
//! The offender list counts one rejection per event: for a key the kernel drops, its count is
//! the windows it was dropped in, not its drops (those are `tollgate_xdp_dropped_total`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::sync::watch;
use tollgate_filter::Filter;
use tollgate_sketch::Tick;

use super::attachment::Attachment;
use super::layout::Level;

/// What the XDP mode needs of the running proxy: where a drop the kernel reported goes (the
/// offender list, the rejection log's budget), and the lists the proxy decides by.
pub(crate) trait Host: Send + Sync + 'static {
    /// Records a rejection of `key` for `why` in the offender list.
    fn record(&self, key: IpAddr, why: &str);
    /// Whether the rejection log's budget allows one more line.
    fn log_allows(&self) -> bool;
    /// The filter whose policy and run-time lists decide.
    fn filter(&self) -> &Filter;
    /// The filter's clock now.
    fn now(&self) -> Tick;
}

/// Bytes of one event (`struct drop_event` in layout.h).
const EVENT_BYTES: usize = 40;

/// How often the ring is read.
const EVENT_PERIOD: Duration = Duration::from_millis(100);

/// How often the kernel's allow tries are brought in step with the run-time lists (a change
/// through the admin endpoint is brought in before its answer; a cluster's, or an entry's
/// expiry, by the next look).
const LIST_PERIOD: Duration = Duration::from_secs(1);

/// One drop the program reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DropEvent {
    /// The source of the attempt dropped.
    pub(crate) source: IpAddr,
    /// The level whose key was over its limit.
    pub(crate) level: Level,
    /// That level's limit.
    pub(crate) limit: u32,
    /// The key's sliding estimate, the dropped attempt included.
    pub(crate) estimate: u64,
    /// The window's index.
    pub(crate) window: u64,
}

impl DropEvent {
    /// The event in `bytes` (`struct drop_event`, little-endian as the program wrote it);
    /// `None` if it is short or names no level.
    pub(crate) fn parse(bytes: &[u8]) -> Option<DropEvent> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        if bytes.len() < EVENT_BYTES {
            return None;
        }
        let (lo, hi) = (word(0)?, word(8)?);
        let level_and_limit = word(16)?;
        // The low half is the level, the high half the limit: both 32-bit fields.
        let level = *Level::ALL.get(usize::try_from(level_and_limit & 0xffff_ffff).ok()?)?;
        let limit = u32::try_from(level_and_limit >> 32).ok()?;
        // The address's bytes as the program read them from the frame, in order.
        let source = if matches!(level, Level::V4Host | Level::V4Net24) {
            let bytes = lo.to_le_bytes();
            IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
        } else {
            let mut octets = [0; 16];
            octets[..8].copy_from_slice(&lo.to_le_bytes());
            octets[8..].copy_from_slice(&hi.to_le_bytes());
            IpAddr::V6(Ipv6Addr::from(octets))
        };
        Some(DropEvent {
            source,
            level,
            limit,
            estimate: word(24)?,
            window: word(32)?,
        })
    }

    /// The key that was over its limit: the source masked to the level's prefix.
    pub(crate) fn network(&self) -> IpAddr {
        match self.source {
            IpAddr::V4(v4) => {
                let mask = u32::MAX << (32 - self.level.prefix());
                IpAddr::V4((v4.to_bits() & mask).into())
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX << (128 - self.level.prefix());
                IpAddr::V6((v6.to_bits() & mask).into())
            }
        }
    }
}

/// Feeds `event` where a refusal of the proxy goes: the offender list (the key, as
/// `xdp /64 RULE`), the rejection log within its budget, and the events counter.
fn report(event: &DropEvent, attachment: &Attachment, host: &impl Host) {
    attachment.metrics().drop_events.inc();
    let network = event.network();
    let why = match attachment.rule_name(event.level) {
        Some(rule) => format!("xdp {} {rule}", event.level.name()),
        None => format!("xdp {}", event.level.name()),
    };
    host.record(network, &why);
    if host.log_allows() {
        tracing::info!(
            listener = "xdp",
            source = %event.source,
            key = %format!("{network}{}", event.level.name()),
            why,
            estimate = event.estimate,
            limit = event.limit,
            window = event.window,
            "rejected"
        );
    }
}

/// Reports every event waiting in `ring`.
fn drain(ring: &mut RingBuf<MapData>, attachment: &Attachment, host: &impl Host) {
    while let Some(item) = ring.next() {
        match DropEvent::parse(&item) {
            Some(event) => report(&event, attachment, host),
            None => {
                attachment.metrics().errors.inc();
            }
        }
    }
}

/// Until `stopped`: reports the program's drop events every [`EVENT_PERIOD`] (reading the
/// ring is reading shared memory, no syscall), and brings the kernel's allow tries in step
/// with the lists every [`LIST_PERIOD`], the first time at once.
///
/// Polled rather than woken through the ring's descriptor: tokio's `AsyncFd` registers a
/// raw descriptor only through an `unsafe` function now, and the workspace forbids `unsafe`;
/// a look every 100 ms at a ring of 5,400 events loses nothing the bound keeps.
pub(crate) async fn follow<H: Host>(
    attachment: Arc<Attachment>,
    host: Arc<H>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ring = attachment.take_events();
    let mut events = tokio::time::interval(EVENT_PERIOD);
    events.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lists = tokio::time::interval(LIST_PERIOD);
    lists.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = lists.tick() => {
                let (syncing, of) = (Arc::clone(&attachment), Arc::clone(&host));
                let sync = move || syncing.sync_lists_of(of.filter(), of.now());
                if tokio::task::spawn_blocking(sync).await.is_err() {
                    return;
                }
            }
            _ = events.tick() => {
                if let Some(ring) = ring.as_mut() {
                    drain(ring, &attachment, &*host);
                }
            }
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(lo: u64, hi: u64, level: u32, limit: u32, estimate: u64, window: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        for word in [
            lo,
            hi,
            u64::from(level) | (u64::from(limit) << 32),
            estimate,
            window,
        ] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn events_read_as_the_program_writes_them() {
        // 192.0.2.1 as a little-endian machine loads it from the frame.
        let v4 = DropEvent::parse(&event(
            u64::from(u32::from_le_bytes([192, 0, 2, 1])),
            0,
            1,
            50,
            51,
            7,
        ))
        .unwrap();
        assert_eq!(v4.source, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            (v4.level, v4.limit, v4.estimate, v4.window),
            (Level::V4Net24, 50, 51, 7)
        );
        assert_eq!(v4.network(), "192.0.2.0".parse::<IpAddr>().unwrap());
        let addr: Ipv6Addr = "2001:db8:77:1::abcd".parse().unwrap();
        let octets = addr.octets();
        let lo = u64::from_le_bytes(octets[..8].try_into().unwrap());
        let hi = u64::from_le_bytes(octets[8..].try_into().unwrap());
        let v6 = DropEvent::parse(&event(lo, hi, 3, 50, 60, 1)).unwrap();
        assert_eq!(v6.source, IpAddr::V6(addr));
        assert_eq!(v6.network(), "2001:db8:77:1::".parse::<IpAddr>().unwrap());
        assert_eq!(
            DropEvent::parse(&event(lo, hi, 5, 50, 60, 1)),
            None,
            "no level 5"
        );
        assert_eq!(DropEvent::parse(&event(lo, hi, 3, 50, 60, 1)[..39]), None);
    }
}
