//! The text of nft's input for each transaction: the table at start, the elements each
//! update, the table's removal at stop. Pure text, so tests read exactly what the kernel gets.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::{KernelAction, KernelConfig};

use super::deny_list::Network;
use super::element::{Element, SETS, Written, set_of};

/// What one transaction changes in the sets (see [`Ruleset::change`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Changes<'a> {
    /// Empty every set first.
    pub(crate) flush: bool,
    /// Networks to take out.
    pub(crate) remove: &'a [Network],
    /// Networks to hold with no timeout (the `deny` list).
    pub(crate) listed: &'a [Network],
    /// Networks to hold for a time (the offenders).
    pub(crate) timed: &'a [Element],
}

/// What the proxy's table holds: its name, the action, and the listeners' addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ruleset {
    table: String,
    action: KernelAction,
    size: usize,
    tcp: Listeners,
    udp: Listeners,
}

/// The listeners of one protocol, as the rules match them: by port alone for those on a
/// wildcard address, by address and port for the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Listeners {
    any: BTreeSet<u16>,
    v4: BTreeSet<(Ipv4Addr, u16)>,
    v6: BTreeSet<(Ipv6Addr, u16)>,
}

impl Listeners {
    fn new(addresses: impl IntoIterator<Item = SocketAddr>) -> Listeners {
        let mut listeners = Listeners::default();
        for address in addresses {
            let port = address.port();
            match address.ip().to_canonical() {
                ip if ip.is_unspecified() => listeners.any.insert(port),
                IpAddr::V4(ip) => listeners.v4.insert((ip, port)),
                IpAddr::V6(ip) => listeners.v6.insert((ip, port)),
            };
        }
        listeners
    }

    /// The rules' matches of these listeners for packets of `family` (`ip` or `ip6`) and
    /// protocol `proto`: `tcp dport { 80, 443 }` for the wildcard ones, `ip daddr . tcp dport
    /// { 192.0.2.1 . 80 }` for the others of that family.
    fn matches(&self, family: &str, proto: &str) -> Vec<String> {
        let mut found = Vec::new();
        if !self.any.is_empty() {
            let listed: Vec<String> = self.any.iter().map(u16::to_string).collect();
            found.push(format!("{proto} dport {{ {} }}", listed.join(", ")));
        }
        let pairs: Vec<String> = if family == "ip" {
            self.v4.iter().map(|(a, p)| format!("{a} . {p}")).collect()
        } else {
            self.v6.iter().map(|(a, p)| format!("{a} . {p}")).collect()
        };
        if !pairs.is_empty() {
            found.push(format!(
                "{family} daddr . {proto} dport {{ {} }}",
                pairs.join(", ")
            ));
        }
        found
    }
}

impl Ruleset {
    /// The ruleset of `config` guarding the listeners bound to the `tcp` and `udp`
    /// addresses.
    #[must_use]
    pub fn new(
        config: &KernelConfig,
        tcp: impl IntoIterator<Item = SocketAddr>,
        udp: impl IntoIterator<Item = SocketAddr>,
    ) -> Ruleset {
        Ruleset {
            table: config.table.clone(),
            action: config.action,
            size: config.max_elements,
            tcp: Listeners::new(tcp),
            udp: Listeners::new(udp),
        }
    }

    /// The table's name.
    #[must_use]
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// One transaction that replaces any table of that name with an empty one: the four
    /// [`SETS`] and the input chain. The chain sits at the raw priority (-300), before conntrack, so a
    /// dropped SYN costs no connection-tracking entry; TCP matches the bare SYN only, so
    /// connections open before a source was listed are left alone. Each rule counts what it
    /// refused (`nft list chain inet TABLE input`).
    #[must_use]
    pub(crate) fn create(&self) -> String {
        let t = &self.table;
        let size = self.size;
        let mut text = format!("table inet {t}\ndelete table inet {t}\ntable inet {t} {{\n");
        for set in SETS {
            let (kind, flags) = match set {
                "v4" => ("ipv4_addr", "interval, timeout"),
                "v6" => ("ipv6_addr", "interval, timeout"),
                "v4_hosts" => ("ipv4_addr", "timeout"),
                _ => ("ipv6_addr", "timeout"),
            };
            let _ = writeln!(
                text,
                "\tset {set} {{ type {kind}; flags {flags}; size {size}; }}"
            );
        }
        text.push_str(
            "\tchain input {\n\t\ttype filter hook input priority -300; policy accept;\n",
        );
        let verdict = match self.action {
            KernelAction::Drop => "drop",
            KernelAction::Reset => "reject with tcp reset",
        };
        let syn = "tcp flags & (fin | syn | rst | ack) == syn";
        for set in SETS {
            let family = if set.starts_with("v4") { "ip" } else { "ip6" };
            for to in self.tcp.matches(family, "tcp") {
                let _ = writeln!(
                    text,
                    "\t\t{to} {syn} {family} saddr @{set} counter {verdict}"
                );
            }
            for to in self.udp.matches(family, "udp") {
                let _ = writeln!(text, "\t\t{to} {family} saddr @{set} counter drop");
            }
        }
        text.push_str("\t}\n}\n");
        text
    }

    /// One transaction that puts this table in place of table `old` (the one in force, if
    /// any) and of any table of this name: [`Ruleset::create`], preceded by the removal of
    /// `old` when its name differs. All of it commits or none: the kernel never runs with
    /// both tables or with neither.
    #[must_use]
    pub(crate) fn replace(&self, old: Option<&str>) -> String {
        match old {
            // `table` first: the delete is no error if someone removed it by hand.
            Some(old) if old != self.table => {
                format!(
                    "table inet {old}\ndelete table inet {old}\n{}",
                    self.create()
                )
            }
            _ => self.create(),
        }
    }

    /// One transaction adding `elements` (each to its `Element::set`). `flush` empties
    /// every set first, in the same transaction (to start over after a failed one). Empty
    /// when there is nothing to do.
    #[must_use]
    pub fn add(&self, elements: &[Element], flush: bool) -> String {
        self.change(&Changes {
            flush,
            timed: elements,
            ..Changes::default()
        })
    }

    /// One transaction making `changes`: the sets emptied (if `flush`), then the networks of
    /// `remove` taken out (each added first, so one the kernel already let go is no error:
    /// `add` of an element that is there changes nothing), then `listed` added with no
    /// timeout and `timed` with theirs. Empty when there is nothing to do.
    #[must_use]
    pub(crate) fn change(&self, changes: &Changes<'_>) -> String {
        let t = &self.table;
        let mut text = String::new();
        if changes.flush {
            for set in SETS {
                let _ = writeln!(text, "flush set inet {t} {set}");
            }
        }
        for set in SETS {
            let gone: Vec<String> = changes
                .remove
                .iter()
                .filter(|&&(n, l)| set_of(n, l) == set)
                .map(|&(n, l)| Written(n, l).to_string())
                .collect();
            if !gone.is_empty() {
                let gone = gone.join(", ");
                let _ = writeln!(text, "add element inet {t} {set} {{ {gone} }}");
                let _ = writeln!(text, "delete element inet {t} {set} {{ {gone} }}");
            }
        }
        for set in SETS {
            let listed = changes
                .listed
                .iter()
                .filter(|&&(n, l)| set_of(n, l) == set)
                .map(|&(n, l)| Written(n, l).to_string());
            let timed = changes
                .timed
                .iter()
                .filter(|e| e.set() == set)
                .map(Element::to_string);
            let all: Vec<String> = listed.chain(timed).collect();
            if !all.is_empty() {
                let _ = writeln!(text, "add element inet {t} {set} {{ {} }}", all.join(", "));
            }
        }
        text
    }

    /// The transaction that removes the table.
    #[must_use]
    pub(crate) fn delete(&self) -> String {
        format!("delete table inet {}\n", self.table)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ruleset(action: KernelAction) -> Ruleset {
        let config = KernelConfig {
            action,
            max_elements: 100,
            ..KernelConfig::default()
        };
        let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
        Ruleset::new(&config, [any(8080), any(443)], [any(53)])
    }

    #[test]
    fn the_table_replaces_any_old_one_and_guards_the_listeners_ports_only() {
        let text = ruleset(KernelAction::Drop).create();
        assert!(
            text.starts_with(
                "table inet tollgate\ndelete table inet tollgate\ntable inet tollgate {"
            )
        );
        let syn = "tcp flags & (fin | syn | rst | ack) == syn";
        assert!(text.contains("set v4 { type ipv4_addr; flags interval, timeout; size 100; }"));
        assert!(text.contains("set v6 { type ipv6_addr; flags interval, timeout; size 100; }"));
        assert!(text.contains("set v4_hosts { type ipv4_addr; flags timeout; size 100; }"));
        assert!(text.contains("set v6_hosts { type ipv6_addr; flags timeout; size 100; }"));
        assert!(text.contains(&format!(
            "tcp dport {{ 443, 8080 }} {syn} ip saddr @v4_hosts counter drop"
        )));
        assert!(text.contains("udp dport { 53 } ip6 saddr @v6_hosts counter drop"));
        assert!(text.contains(&format!(
            "tcp dport {{ 443, 8080 }} {syn} ip saddr @v4 counter drop"
        )));
        assert!(text.contains(&format!(
            "tcp dport {{ 443, 8080 }} {syn} ip6 saddr @v6 counter drop"
        )));
        assert!(text.contains("udp dport { 53 } ip saddr @v4 counter drop"));
        assert!(text.contains("udp dport { 53 } ip6 saddr @v6 counter drop"));
        let reset = ruleset(KernelAction::Reset).create();
        assert!(reset.contains("ip saddr @v4 counter reject with tcp reset"));
        assert!(reset.contains("udp dport { 53 } ip saddr @v4 counter drop"));
    }

    #[test]
    fn listeners_on_an_address_are_matched_by_address_and_port() {
        let config = KernelConfig::default();
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        let rules = Ruleset::new(
            &config,
            [
                at("192.0.2.1:80"),
                at("[::]:443"),
                at("[2001:db8::1]:80"),
                at("[::ffff:192.0.2.2]:8080"),
            ],
            [at("192.0.2.1:53")],
        );
        let text = rules.create();
        let syn = "tcp flags & (fin | syn | rst | ack) == syn";
        for line in [
            format!("tcp dport {{ 443 }} {syn} ip saddr @v4 counter drop"),
            format!("tcp dport {{ 443 }} {syn} ip6 saddr @v6 counter drop"),
            format!(
                "ip daddr . tcp dport {{ 192.0.2.1 . 80, 192.0.2.2 . 8080 }} {syn} ip saddr @v4 counter drop"
            ),
            format!(
                "ip6 daddr . tcp dport {{ 2001:db8::1 . 80 }} {syn} ip6 saddr @v6_hosts counter drop"
            ),
            "ip daddr . udp dport { 192.0.2.1 . 53 } ip saddr @v4_hosts counter drop".to_owned(),
        ] {
            assert!(text.contains(&line), "{line}\nnot in\n{text}");
        }
        // An address of one family is never matched against the other's sets.
        assert!(!text.contains("ip6 daddr . tcp dport { 2001:db8::1 . 80 } tcp flags & (fin | syn | rst | ack) == syn ip saddr"));
        assert!(
            !text.contains("ip6 saddr @v6 counter drop\n\t\tip daddr"),
            "{text}"
        );
        assert!(!text.contains("udp dport { 192.0.2.1 . 53 } ip6"), "{text}");
        assert!(!text.contains("udp dport { 53 }"), "{text}");
    }

    #[test]
    fn a_table_of_another_name_is_replaced_in_the_same_transaction() {
        let rules = ruleset(KernelAction::Drop);
        assert_eq!(rules.replace(None), rules.create());
        assert_eq!(rules.replace(Some("tollgate")), rules.create());
        let text = rules.replace(Some("old_table"));
        assert_eq!(
            text,
            format!(
                "table inet old_table\ndelete table inet old_table\n{}",
                rules.create()
            )
        );
    }

    #[test]
    fn one_transaction_adds_every_element_to_its_family_set() {
        let element = |network: &str, len| Element {
            network: network.parse().unwrap(),
            len,
            timeout: Duration::from_millis(1500),
            weight: 2.0,
        };
        let rules = ruleset(KernelAction::Drop);
        let elements = [
            element("192.0.2.1", 32),
            element("2001:db8::", 64),
            element("198.51.100.0", 24),
        ];
        assert_eq!(
            rules.add(&elements, false),
            "add element inet tollgate v4 { 198.51.100.0/24 timeout 1500ms }\n\
             add element inet tollgate v4_hosts { 192.0.2.1 timeout 1500ms }\n\
             add element inet tollgate v6 { 2001:db8::/64 timeout 1500ms }\n"
        );
        assert!(
            rules
                .add(&elements[..1], true)
                .starts_with("flush set inet tollgate v4\nflush set inet tollgate v4_hosts\n")
        );
        assert_eq!(rules.add(&[], false), "");
        assert_eq!(rules.delete(), "delete table inet tollgate\n");
    }

    #[test]
    fn the_table_is_named_as_configured() {
        // The name a reload's replace deletes when the next config renames the table: a
        // wrong one would leave the old table (and its drops) in force beside the new.
        let config = KernelConfig {
            table: "edge_guard".to_owned(),
            ..KernelConfig::default()
        };
        let rules = Ruleset::new(&config, Vec::<SocketAddr>::new(), Vec::<SocketAddr>::new());
        assert_eq!(rules.table(), "edge_guard");
        assert!(rules.create().starts_with("table inet edge_guard\n"));
    }
}
