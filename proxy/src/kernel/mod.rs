//! The kernel fast path (`[kernel]`): the heaviest offenders are dropped by nftables before
//! they reach accept.
//!
//! The proxy owns one nftables table (family `inet`, named by `[kernel] table`) holding
//! interval sets with timeouts for prefixes (`v4`, `v6`) and hash sets with timeouts for
//! single addresses (`v4_hosts`, `v6_hosts`), and an input chain at the raw priority that
//! drops (or answers with a TCP reset) new connections and datagrams from those sets to the
//! listeners only (by port for a listener on a wildcard address, by address and port for
//! the others). Every `[kernel] interval`, and at once when a decision rings its `Wake`
//! (at most one update per `GAP`), an `Updater` asks the policy where the listed
//! offenders stand and adds those over `factor` times a limit, or serving a penalty,
//! in one atomic transaction, each with a timeout equal to the time left until its estimate
//! falls back under the limit (or its penalty ends); at most `max_elements`, heaviest first.
//! `shadow` rules never put anything into the kernel. The policy's `deny` list goes in too,
//! with no timeout, cut around any longer `allow` entry (`denied`), and leaves the kernel
//! when a reload drops it. A reload that changes, adds or removes `[kernel]` replaces, makes
//! or deletes the table (`follow`); what the kernel holds is kept in a `View` for the
//! admin endpoint.
//!
//! The transactions go through one `nft -f -` process each (nft's own parser and its
//! netlink batch: the whole update commits or none of it does), never one per element.

mod control;
mod deny_list;
mod element;
mod host;
mod metrics;
mod nft;
mod ruleset;
mod selection;
mod table;
mod updater;
mod view;
mod wake;

pub(crate) use control::{Current, Guarded, Setup, follow, start_updater};
pub use element::Element;
pub(crate) use element::SETS;
pub(crate) use host::Host;
pub use metrics::KernelMetrics;
pub use nft::NftError;
pub use ruleset::Ruleset;
pub use table::Table;
pub(crate) use view::View;
pub(crate) use wake::Wake;
