//! The policy as typed values: what a config file says once it has been checked.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::key::RuleId;
use crate::prefix::Prefix;
use crate::units::Rate;

/// A network in a list or a rule's sources: an address and a prefix length of its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The address as written (host bits are ignored when matching).
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: Prefix,
}

impl Cidr {
    /// Parses `a.b.c.d/len` or `x:y::/len`; a bare address is the whole address (`/32`,
    /// `/128`).
    ///
    /// # Errors
    /// A message naming the bad address or the prefix length that is too long.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| {
            format!(
                "`{text}` is not a network: `{}` is not an IP address",
                addr.trim()
            )
        })?;
        let len = match len {
            None => None,
            Some(len) => Some(len.trim().parse::<u32>().map_err(|_| {
                format!(
                    "`{text}`: the prefix length `{}` is not a number",
                    len.trim()
                )
            })?),
        };
        let prefix = match addr {
            IpAddr::V4(_) => Prefix::v4(len.unwrap_or(32)),
            IpAddr::V6(_) => Prefix::v6(len.unwrap_or(128)),
        }
        .map_err(|err| format!("`{text}`: {err}"))?;
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix.len())
    }
}

/// Which traffic a rule applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolMatch {
    /// TCP connections or segments.
    Tcp,
    /// UDP datagrams.
    Udp,
    /// Both.
    #[default]
    Any,
}

/// The transport of one event, as the proxy or a parsed frame reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A TCP connection or segment.
    Tcp,
    /// A UDP datagram.
    Udp,
    /// Anything else over IP.
    Other,
}

impl From<crate::packet::Protocol> for Transport {
    fn from(protocol: crate::packet::Protocol) -> Transport {
        match protocol {
            crate::packet::Protocol::Tcp => Transport::Tcp,
            crate::packet::Protocol::Udp => Transport::Udp,
            crate::packet::Protocol::Other(_) => Transport::Other,
        }
    }
}

impl ProtocolMatch {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolMatch::Tcp => "tcp",
            ProtocolMatch::Udp => "udp",
            ProtocolMatch::Any => "any",
        }
    }

    /// Whether a rule with this match applies to an event over `transport`.
    #[must_use]
    pub fn matches(self, transport: Transport) -> bool {
        match self {
            ProtocolMatch::Any => true,
            ProtocolMatch::Tcp => transport == Transport::Tcp,
            ProtocolMatch::Udp => transport == Transport::Udp,
        }
    }
}

/// What a limit counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weight {
    /// Each event (connection, datagram, packet) counts 1.
    #[default]
    Events,
    /// Each event counts its size in bytes.
    Bytes,
}

impl Weight {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Weight::Events => "events",
            Weight::Bytes => "bytes",
        }
    }
}

/// What the proxy does with an event over a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Close the connection (FIN).
    Close,
    /// Reset the connection (RST).
    #[default]
    Reset,
    /// Hold the connection for a bounded time, then decide again (a tarpit).
    Delay,
    /// Write the configured reply (e.g. HTTP 429), then close.
    Reply,
    /// Drop the datagram or packet silently.
    Drop,
}

impl Action {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Close => "close",
            Action::Reset => "reset",
            Action::Delay => "delay",
            Action::Reply => "reply",
            Action::Drop => "drop",
        }
    }
}

/// One limit of a rule: a rate, counted per address masked to a prefix length per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    /// The rate allowed.
    pub rate: Rate,
    /// The prefix IPv4 sources are counted at (default /32, the address).
    pub ipv4_prefix: Prefix,
    /// The prefix IPv6 sources are counted at (default /64, one subscriber's network).
    pub ipv6_prefix: Prefix,
}

/// A rule: which traffic it matches and the limits it applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The rule's name, unique in a policy; its counters survive reloads under the same name.
    pub name: String,
    /// The stable id derived from the name.
    pub id: RuleId,
    /// Which protocol it matches.
    pub protocol: ProtocolMatch,
    /// Source networks it matches; empty means every source.
    pub sources: Vec<Cidr>,
    /// Its limits, all checked for every matching event.
    pub limits: Vec<Limit>,
    /// What the limits count.
    pub weight: Weight,
    /// What happens over a limit.
    pub action: Action,
    /// Count and report only, never enforce.
    pub shadow: bool,
    /// Once over a limit, a source is refused this long.
    pub penalty: Option<Duration>,
    /// With `action = "delay"`: the longest a connection is held before it is decided again
    /// (the proxy's default applies when unset).
    pub delay: Option<Duration>,
    /// With `action = "reply"`: the bytes to write before closing, a template (the proxy's
    /// default, an HTTP 429, applies when unset; see the proxy's docs for the placeholders).
    pub reply: Option<String>,
}

impl Rule {
    /// A hash of what the rule counts: its name, protocol, sources, weight and limits (rate,
    /// period, prefix lengths), not what it does over a limit. A cluster puts it in the keys
    /// of the rule's shared counts, so nodes whose rules of one name count different things
    /// never add into each other's counts (and a rule changed at a reload starts new ones).
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::Config;
    /// let a = Config::parse("[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }]\n")?;
    /// let b = Config::parse("[[rule]]\nname = \"r\"\nlimits = [{ rate = \"20/1s\" }]\n")?;
    /// assert_ne!(a.rules[0].shape(), b.rules[0].shape());
    /// assert_eq!(a.rules[0].shape(), a.clone().rules[0].shape());
    /// # Ok::<(), tollgate_filter::ConfigErrors>(())
    /// ```
    #[must_use]
    pub fn shape(&self) -> u64 {
        use std::fmt::Write as _;
        let mut text = format!(
            "{}\n{}\n{}\n",
            self.name,
            self.protocol.as_str(),
            self.weight.as_str()
        );
        for cidr in &self.sources {
            // Writing to a String cannot fail.
            let _ = write!(text, "{cidr} ");
        }
        for limit in &self.limits {
            let _ = write!(
                text,
                "\n{} {} {} {}",
                limit.rate.count,
                limit.rate.per.as_nanos(),
                limit.ipv4_prefix,
                limit.ipv6_prefix
            );
        }
        xxh3_64(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn rule(fields: &str) -> Rule {
        let text = format!("[[rule]]\nname = \"r\"\n{fields}\n");
        Config::parse(&text).unwrap().rules.remove(0)
    }

    #[test]
    fn a_network_prints_as_written_with_its_length() {
        assert_eq!(
            Cidr::parse("192.0.2.9/24").unwrap().to_string(),
            "192.0.2.9/24"
        );
        assert_eq!(
            Cidr::parse("2001:db8::").unwrap().to_string(),
            "2001:db8::/128"
        );
    }

    #[test]
    fn the_config_words_are_the_ones_it_parses() {
        let words = [
            ProtocolMatch::Tcp.as_str(),
            ProtocolMatch::Udp.as_str(),
            ProtocolMatch::Any.as_str(),
            Weight::Events.as_str(),
            Weight::Bytes.as_str(),
            Action::Close.as_str(),
            Action::Reset.as_str(),
            Action::Delay.as_str(),
            Action::Reply.as_str(),
            Action::Drop.as_str(),
        ];
        assert_eq!(
            words,
            [
                "tcp", "udp", "any", "events", "bytes", "close", "reset", "delay", "reply", "drop"
            ]
        );
    }

    #[test]
    fn a_protocol_match_takes_its_transport_only() {
        use Transport::{Other, Tcp, Udp};
        let takes = |m: ProtocolMatch| [Tcp, Udp, Other].map(|t| m.matches(t));
        assert_eq!(takes(ProtocolMatch::Tcp), [true, false, false]);
        assert_eq!(takes(ProtocolMatch::Udp), [false, true, false]);
        assert_eq!(takes(ProtocolMatch::Any), [true, true, true]);
    }

    #[test]
    fn the_shape_changes_with_what_is_counted_and_only_that() {
        let base = "limits = [{ rate = \"10/1s\", ipv4_prefix = 24, ipv6_prefix = 64 }]";
        let shape = |fields: &str| rule(fields).shape();
        let same = shape(base);
        assert_eq!(same, rule(base).shape(), "a pure function of the rule");
        // What the rule does over a limit is not what it counts.
        assert_eq!(
            shape(&format!("{base}\naction = \"close\"\nshadow = true")),
            same
        );
        let counted_apart = [
            format!("{base}\nprotocol = \"tcp\""),
            format!("{base}\nprotocol = \"udp\""),
            format!("{base}\nweight = \"bytes\""),
            format!("{base}\nsources = [\"192.0.2.0/24\"]"),
            format!("{base}\nsources = [\"192.0.2.0/25\"]"),
            "limits = [{ rate = \"11/1s\", ipv4_prefix = 24, ipv6_prefix = 64 }]".into(),
            "limits = [{ rate = \"10/2s\", ipv4_prefix = 24, ipv6_prefix = 64 }]".into(),
            "limits = [{ rate = \"10/1s\", ipv4_prefix = 16, ipv6_prefix = 64 }]".into(),
            "limits = [{ rate = \"10/1s\", ipv4_prefix = 24, ipv6_prefix = 48 }]".into(),
        ];
        let mut shapes: Vec<u64> = counted_apart.iter().map(|f| shape(f)).collect();
        shapes.push(same);
        let count = shapes.len();
        shapes.sort_unstable();
        shapes.dedup();
        assert_eq!(shapes.len(), count, "{counted_apart:?}");
        let mut renamed = rule(base);
        renamed.name = "s".into();
        assert_ne!(renamed.shape(), same);
    }
}
