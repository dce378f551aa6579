//! The allow lists in the kernel: `[lists]` and the run-time entries (the admin's `POST
//! /lists/allow|deny`, a cluster's) as two LPM tries the program looks a source up in before
//! it counts anything, so an allowed source passes the driver as it passes the proxy.
//!
//! The proxy answers a source by the longest network holding it among the allow and deny
//! entries (an identical network in both denies), and an allowed source is neither counted
//! nor refused. The tries hold what that answer needs: every allowed network, and every deny
//! entry inside a shorter allowed one (a hole, counted); the longest match in the trie is then
//! the proxy's answer for every source an allowed network holds. A source no allowed network
//! holds matches nothing and is counted as before (deny-listed sources included: the proxy
//! refuses them whatever the kernel does).
//!
//! Each family's trie holds at most [`ALLOW_ENTRIES`]. Lists that need more err on the side
//! of the proxy: the entries past the bound are left out, and that family is counted but never
//! dropped at the driver (`LISTS_KEEP_*`), so no allowed source is refused there; the proxy
//! still decides every attempt it sees. `tollgate_xdp_allow_left_out` counts the entries left
//! out and the log says so when it changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tollgate_filter::{Cidr, ListEntry, ListKind};

use super::layout::{LISTS_KEEP_V4, LISTS_KEEP_V6, LISTS_V4, LISTS_V6};
use super::program::{Program, XdpError};

/// Entries each family's trie holds at most (`ALLOW_ENTRIES` in layout.h).
pub(crate) const ALLOW_ENTRIES: usize = 65_536;

/// A network: its address, host bits cleared, and its prefix length.
pub(crate) type Network = (IpAddr, u8);

/// The index of a network's family: 0 for IPv4, 1 for IPv6.
fn family(network: &Network) -> usize {
    usize::from(network.0.is_ipv6())
}

/// `addr` with all but its first `len` bits cleared.
fn masked(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((v4.to_bits() & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((v6.to_bits() & mask).into())
        }
    }
}

/// What the tries hold for the lists `allow` and `deny` (the file's and the run-time entries
/// in force, together): each allowed network (`true`: its sources pass uncounted) and each
/// deny entry inside a shorter allowed network (`false`: counted). A network in both lists is
/// a deny entry, as in the policy.
pub(crate) fn wanted(
    allow: impl IntoIterator<Item = Cidr>,
    deny: impl IntoIterator<Item = Cidr>,
) -> BTreeMap<Network, bool> {
    let network = |cidr: Cidr| {
        let len = cidr.prefix.len();
        (masked(cidr.addr, len), len)
    };
    let mut entries: BTreeMap<Network, bool> =
        allow.into_iter().map(|c| (network(c), true)).collect();
    let deny: Vec<Network> = deny.into_iter().map(network).collect();
    for network in &deny {
        entries.remove(network);
    }
    // The lengths of allowed networks, per family: a hole is looked for at each.
    let lengths: BTreeSet<(usize, u8)> = entries.keys().map(|n| (family(n), n.1)).collect();
    for (addr, len) in deny {
        let inside = lengths
            .range((family(&(addr, len)), 0)..(family(&(addr, len)), len))
            .any(|&(_, shorter)| entries.get(&(masked(addr, shorter), shorter)) == Some(&true));
        if inside {
            entries.insert((addr, len), false);
        }
    }
    entries
}

/// The lists a sync brought in: the file's allow and deny lists, and the run-time entries.
type Inputs = (Vec<Cidr>, Vec<Cidr>, Vec<(Cidr, ListKind)>);

/// What the program's tries hold, and the lists they were made from.
#[derive(Debug)]
pub(crate) struct KernelLists {
    /// Entries a family's trie may hold ([`ALLOW_ENTRIES`]; less in tests).
    room: usize,
    /// The file's allow and deny lists and the run-time entries last brought in: a sync with
    /// the same ones changes nothing.
    inputs: Option<Inputs>,
    /// The entries in the tries.
    held: BTreeMap<Network, bool>,
    /// Per family, the entries wanted but not held (past `room`, or refused by the kernel).
    left_out: [usize; 2],
    /// The `LISTS_*` bits in force.
    flags: u64,
    /// Per family (IPv4, IPv6), whether the program counts it without dropping (`LISTS_KEEP_*`):
    /// the proxy then enforces the kernel's limits for that family itself (see
    /// [`KernelLists::undropped`]).
    undropped: Arc<[AtomicBool; 2]>,
}

/// What a sync did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Synced {
    /// Entries put into the tries (new or changed).
    pub(crate) put: usize,
    /// Entries taken out.
    pub(crate) taken: usize,
    /// Entries held now, both families.
    pub(crate) held: usize,
    /// Entries left out now, per family (IPv4, IPv6).
    pub(crate) left_out: [usize; 2],
}

impl KernelLists {
    /// Empty tries of `room` entries per family.
    pub(crate) fn new(room: usize) -> KernelLists {
        KernelLists {
            room,
            inputs: None,
            held: BTreeMap::new(),
            left_out: [0; 2],
            flags: 0,
            undropped: Arc::default(),
        }
    }

    /// Per family (IPv4, IPv6), whether the program counts its attempts without ever dropping
    /// them, because that family's lists did not fit: the proxy's data path reads it for each
    /// arrival, so that it does not leave to the kernel limits the kernel does not enforce.
    /// It is raised before the program stops dropping and lowered only after it drops again.
    pub(crate) fn undropped(&self) -> Arc<[AtomicBool; 2]> {
        Arc::clone(&self.undropped)
    }

    /// The run-time entries last brought in (a reload brings in the file's new lists with
    /// them).
    pub(crate) fn runtime(&self) -> Vec<(Cidr, ListKind)> {
        self.inputs
            .as_ref()
            .map(|(_, _, runtime)| runtime.clone())
            .unwrap_or_default()
    }

    /// Entries held, both families.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Makes `program`'s tries hold what `allow`, `deny` (the file's) and `runtime` (the
    /// run-time entries in force) need; `None` when they are the lists of the last sync.
    ///
    /// In this order, so that no frame meets a state that refuses an allowed source: the
    /// flags of before and after together (a family kept from dropping by either stays
    /// kept), the entries put, those no longer wanted taken out, then the flags of after. A
    /// frame decided meanwhile may find an entry put and not yet its neighbour taken out: it
    /// passes uncounted what one of the two lists allows. An entry the kernel refuses is left
    /// out, as one past the bound is.
    ///
    /// # Errors
    /// The kernel's refusal of a config write or of taking an entry out (those stay held and
    /// are taken out at the next sync).
    pub(crate) fn sync(
        &mut self,
        program: &mut Program,
        allow: &[Cidr],
        deny: &[Cidr],
        runtime: &[(Cidr, ListKind)],
    ) -> Result<Option<Synced>, XdpError> {
        if self
            .inputs
            .as_ref()
            .is_some_and(|(a, d, r)| a[..] == *allow && d[..] == *deny && r[..] == *runtime)
        {
            return Ok(None);
        }
        let of = |kind: ListKind| {
            runtime
                .iter()
                .filter(move |(_, k)| *k == kind)
                .map(|(c, _)| *c)
        };
        let wanted = wanted(
            allow.iter().copied().chain(of(ListKind::Allow)),
            deny.iter().copied().chain(of(ListKind::Deny)),
        );
        let mut fitting: BTreeMap<Network, bool> = BTreeMap::new();
        let mut count = [0; 2];
        let mut left_out = [0; 2];
        for (network, allowed) in wanted {
            let family = family(&network);
            if count[family] < self.room {
                count[family] += 1;
                fitting.insert(network, allowed);
            } else {
                left_out[family] += 1;
            }
        }
        let keep = |left_out: [usize; 2]| {
            (if left_out[0] > 0 { LISTS_KEEP_V4 } else { 0 })
                | (if left_out[1] > 0 { LISTS_KEEP_V6 } else { 0 })
        };
        // Before: the kept families of both, lookups in the tries of both.
        let during = self.flags | keep(left_out) | lookups(fitting.keys());
        self.set_flags(program, during)?;
        let mut synced = Synced::default();
        for (&network, &allowed) in &fitting {
            if self.held.get(&network) == Some(&allowed) {
                continue;
            }
            match program.list(network.0, network.1, allowed) {
                Ok(()) => {
                    self.held.insert(network, allowed);
                    synced.put += 1;
                }
                Err(err) => {
                    left_out[family(&network)] += 1;
                    tracing::warn!(
                        %err,
                        network = %format!("{}/{}", network.0, network.1),
                        "XDP mode: the kernel refused an allow-list entry: its family is \
                         counted but never dropped at the driver"
                    );
                    // Kept from dropping before the next entry goes in.
                    self.set_flags(program, self.flags | keep(left_out))?;
                }
            }
        }
        let gone: Vec<Network> = self
            .held
            .keys()
            .filter(|n| !fitting.contains_key(n))
            .copied()
            .collect();
        for network in gone {
            program.unlist(network.0, network.1)?;
            self.held.remove(&network);
            synced.taken += 1;
        }
        self.set_flags(program, keep(left_out) | lookups(self.held.keys()))?;
        self.left_out = left_out;
        self.inputs = Some((allow.to_vec(), deny.to_vec(), runtime.to_vec()));
        synced.held = self.held.len();
        synced.left_out = left_out;
        Ok(Some(synced))
    }

    /// Writes `flags` into the program's config if they differ from those in force.
    fn set_flags(&mut self, program: &mut Program, flags: u64) -> Result<(), XdpError> {
        if flags != self.flags {
            let kept = |flags: u64| [flags & LISTS_KEEP_V4 != 0, flags & LISTS_KEEP_V6 != 0];
            let (before, after) = (kept(self.flags), kept(flags));
            for (family, undropped) in self.undropped.iter().enumerate() {
                if after[family] {
                    undropped.store(true, Ordering::SeqCst);
                }
            }
            let config = program.config();
            program.configure(super::layout::Config {
                lists: flags,
                ..config
            })?;
            self.flags = flags;
            for (family, undropped) in self.undropped.iter().enumerate() {
                if before[family] && !after[family] {
                    undropped.store(false, Ordering::SeqCst);
                }
            }
        }
        Ok(())
    }
}

/// The `LISTS_V4` and `LISTS_V6` bits of tries holding `networks`.
fn lookups<'a>(networks: impl Iterator<Item = &'a Network>) -> u64 {
    networks.fold(0, |bits, n| {
        bits | if n.0.is_ipv4() { LISTS_V4 } else { LISTS_V6 }
    })
}

/// The run-time entries in force as the tries need them: network and list.
pub(crate) fn runtime(entries: &[ListEntry]) -> Vec<(Cidr, ListKind)> {
    entries.iter().map(|e| (e.cidr, e.kind)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(texts: &[&str]) -> Vec<Cidr> {
        texts.iter().map(|t| Cidr::parse(t).unwrap()).collect()
    }

    fn net(text: &str) -> Network {
        let cidr = Cidr::parse(text).unwrap();
        (cidr.addr, cidr.prefix.len())
    }

    /// The longest match of `addr` in `entries`, by a scan of every entry.
    fn longest(entries: &BTreeMap<Network, bool>, addr: IpAddr) -> Option<bool> {
        entries
            .iter()
            .filter(|((network, len), _)| {
                network.is_ipv4() == addr.is_ipv4() && masked(addr, *len) == *network
            })
            .max_by_key(|((_, len), _)| *len)
            .map(|(_, &allowed)| allowed)
    }

    /// The policy's answer for `addr`: the longest matching entry, deny at a tie; `Some(true)`
    /// when it is an allow entry.
    fn policy_allows(allow: &[Cidr], deny: &[Cidr], addr: IpAddr) -> bool {
        let matching = |list: &[Cidr]| {
            list.iter()
                .filter(|c| {
                    c.addr.is_ipv4() == addr.is_ipv4()
                        && masked(addr, c.prefix.len()) == masked(c.addr, c.prefix.len())
                })
                .map(|c| c.prefix.len())
                .max()
        };
        match (matching(allow), matching(deny)) {
            (Some(a), Some(d)) => a > d,
            (Some(_), None) => true,
            _ => false,
        }
    }

    #[test]
    fn the_tries_answer_as_the_policy_does() {
        let allow = cidrs(&[
            "10.0.0.0/8",
            "10.1.2.0/24",
            "192.0.2.7",
            "2001:db8::/32",
            "2001:db8:1::/48",
            "198.51.100.0/24",
        ]);
        let deny = cidrs(&[
            "10.1.0.0/16",
            "10.1.2.128/25",
            "172.16.0.0/12",
            "2001:db8:1:2::/64",
            "198.51.100.0/24",
            "0.0.0.0/0",
        ]);
        let entries = wanted(allow.clone(), deny.clone());
        // The holes inside allowed networks are held, counted; a deny entry outside every
        // allowed network is not held (it matches nothing in the trie: counted).
        assert_eq!(entries.get(&net("10.1.0.0/16")), Some(&false));
        assert_eq!(entries.get(&net("10.1.2.128/25")), Some(&false));
        assert_eq!(entries.get(&net("2001:db8:1:2::/64")), Some(&false));
        assert_eq!(entries.get(&net("172.16.0.0/12")), None);
        assert_eq!(entries.get(&net("0.0.0.0/0")), None);
        // In both lists: denied, and inside no other allowed network, so not held.
        assert_eq!(entries.get(&net("198.51.100.0/24")), None);
        for addr in [
            "10.0.0.1",
            "10.1.0.1",
            "10.1.2.1",
            "10.1.2.200",
            "192.0.2.7",
            "192.0.2.8",
            "172.16.0.1",
            "198.51.100.1",
            "2001:db8::1",
            "2001:db8:1::1",
            "2001:db8:1:2::1",
            "2001:db8:2::1",
            "2001:db9::1",
        ] {
            let addr: IpAddr = addr.parse().unwrap();
            assert_eq!(
                longest(&entries, addr) == Some(true),
                policy_allows(&allow, &deny, addr),
                "{addr}"
            );
        }
    }

    #[test]
    fn host_bits_are_cleared() {
        let entries = wanted(cidrs(&["10.1.2.3/16", "2001:db8::1/32"]), []);
        assert_eq!(
            entries.keys().copied().collect::<Vec<_>>(),
            vec![net("10.1.0.0/16"), net("2001:db8::/32")]
        );
    }
}
