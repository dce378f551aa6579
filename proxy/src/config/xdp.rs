//! `[xdp]`: attempts counted and decided at the driver, by the XDP program (see
//! [`crate::xdp`]).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use tollgate_filter::parse_size;
use toml::Spanned;

use super::{Errors, Listener, duration, list, quoted};

/// `[xdp]`: the interfaces the XDP program is attached to, how, which ports it guards and
/// how much memory its sketch takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct XdpConfig {
    /// The interfaces the program is attached to, at least one.
    pub(crate) interfaces: Vec<String>,
    /// In the driver or in the stack.
    pub(crate) mode: XdpMode,
    /// The listeners whose ports are guarded (by name); `None`: every listener.
    pub(crate) listeners: Option<Vec<String>>,
    /// Other ports guarded besides the listeners' (a UDP service, SSH).
    pub(crate) ports: Vec<u16>,
    /// Bytes of the kernel's sketch (three slices of two rows of 32-bit cells).
    pub(crate) memory: u64,
    /// The kernel's window: only limits whose period is this long go into the kernel.
    /// `None`: the shortest period among the limits the kernel can take.
    pub(crate) window: Option<Duration>,
    /// Refuse to start when the program cannot be loaded or attached; otherwise the proxy
    /// runs without it and says so.
    pub(crate) required: bool,
}

/// Where the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XdpMode {
    /// In the driver, before any buffer is allocated (the driver must support XDP).
    Native,
    /// In the stack, after the buffer is allocated: any interface, less gain.
    Generic,
}

impl XdpMode {
    /// The config file's word for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }
}

/// The default `[xdp] memory`: 8 MiB.
pub(crate) const DEFAULT_XDP_MEMORY: u64 = 8 << 20;
/// The least `[xdp] memory`: 64 KiB.
const MIN_XDP_MEMORY: u64 = 64 << 10;
/// The most `[xdp] memory`: 1 GiB (kernel memory, locked).
const MAX_XDP_MEMORY: u64 = 1 << 30;
/// The longest kernel window: 2^32 ticks of 1,024 ns (layout.rs's `MAX_WINDOW`), a bit over
/// 73 minutes, rounded down to whole seconds.
const MAX_XDP_WINDOW: Duration = Duration::from_secs(4398);
/// Longest interface name (the kernel's IFNAMSIZ less its terminating zero).
const MAX_INTERFACE: usize = 15;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawXdp {
    interfaces: Spanned<Vec<Spanned<String>>>,
    mode: Option<Spanned<String>>,
    listeners: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    ports: Vec<Spanned<i64>>,
    memory: Option<Spanned<String>>,
    window: Option<Spanned<String>>,
    #[serde(default)]
    required: bool,
}

/// The `[xdp]` section, every field checked; `listeners` are the file's listeners, which
/// `[xdp] listeners` must name.
pub(super) fn xdp(
    raw: &Spanned<RawXdp>,
    listeners: &[Listener],
    errors: &mut Errors<'_>,
) -> Option<XdpConfig> {
    let section = raw.get_ref();
    let mut ok = true;
    let mut interfaces = Vec::new();
    if section.interfaces.get_ref().is_empty() {
        errors.at(
            &section.interfaces,
            "`[xdp] interfaces` is empty: name at least one interface".to_owned(),
        );
        ok = false;
    }
    for name in section.interfaces.get_ref() {
        match errors.check(name, |n| interface(n)) {
            Some(n) if interfaces.contains(&n) => {
                errors.at(name, format!("interface `{n}` is named twice"));
                ok = false;
            }
            Some(n) => interfaces.push(n),
            None => ok = false,
        }
    }
    let mode = match &section.mode {
        Some(mode) => errors.check(mode, |m| match m.as_str() {
            "native" => Ok(XdpMode::Native),
            "generic" => Ok(XdpMode::Generic),
            other => Err(format!(
                "`{other}` is not an XDP mode: use \"native\" or \"generic\""
            )),
        }),
        None => Some(XdpMode::Native),
    };
    let chosen = section.listeners.as_ref().map(|names| {
        let mut chosen = Vec::new();
        for name in names {
            let known = listeners.iter().any(|l| &l.name == name.get_ref());
            if !known {
                errors.at(
                    name,
                    format!(
                        "`[xdp] listeners` names `{}`, which no [[listener]] is",
                        name.get_ref()
                    ),
                );
                ok = false;
            } else if !chosen.contains(name.get_ref()) {
                chosen.push(name.get_ref().clone());
            }
        }
        chosen
    });
    let mut ports = Vec::new();
    for port in &section.ports {
        match errors.check(port, |&p| match u16::try_from(p) {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(format!("port {p} is not between 1 and 65535")),
        }) {
            Some(p) if !ports.contains(&p) => ports.push(p),
            Some(_) => {}
            None => ok = false,
        }
    }
    let guards_none = chosen.as_ref().map_or(listeners.is_empty(), Vec::is_empty);
    if ok && guards_none && ports.is_empty() {
        errors.at(
            raw,
            "`[xdp]` guards no port: name listeners (or leave `listeners` out with at least \
             one [[listener]]) or `ports`"
                .to_owned(),
        );
        ok = false;
    }
    let memory = match &section.memory {
        Some(memory) => errors.check(memory, |m| xdp_memory(m)),
        None => Some(DEFAULT_XDP_MEMORY),
    };
    let window = section.window.as_ref().map(|w| {
        errors.check(w, |text| {
            let d = tollgate_filter::parse_duration(text)?;
            if d.is_zero() || d > MAX_XDP_WINDOW {
                Err(format!(
                    "window `{text}` is not between 1ms and {}s (the kernel's longest window)",
                    MAX_XDP_WINDOW.as_secs()
                ))
            } else {
                Ok(d)
            }
        })
    });
    let window = match window {
        Some(None) => return None,
        Some(Some(w)) => Some(w),
        None => None,
    };
    if !ok {
        return None;
    }
    Some(XdpConfig {
        interfaces,
        mode: mode?,
        listeners: chosen,
        ports,
        memory: memory?,
        window,
        required: section.required,
    })
}

/// An interface name as the kernel takes it: 1 to 15 bytes, no `/`, `:`, whitespace or
/// control character.
fn interface(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= MAX_INTERFACE
        && text != "."
        && text != ".."
        && !text
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not an interface name: 1 to {MAX_INTERFACE} bytes, no `/`, `:` or \
             space"
        ))
    }
}

/// `[xdp] memory`: a size between 64 KiB and 1 GiB.
fn xdp_memory(text: &str) -> Result<u64, String> {
    let size = parse_size(text)? as u64;
    if (MIN_XDP_MEMORY..=MAX_XDP_MEMORY).contains(&size) {
        Ok(size)
    } else {
        Err(format!(
            "memory `{text}` is not between 64KiB and 1GiB (the kernel's sketch, locked memory)"
        ))
    }
}

impl XdpConfig {
    /// `[xdp]` as the config file writes it.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\n[xdp]\ninterfaces = {}", list(self.interfaces.clone()))?;
        writeln!(f, "mode = {}", quoted(self.mode.as_str()))?;
        if let Some(listeners) = &self.listeners {
            writeln!(f, "listeners = {}", list(listeners.clone()))?;
        }
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        writeln!(f, "ports = [{}]", ports.join(", "))?;
        writeln!(f, "memory = {}", quoted(&self.memory.to_string()))?;
        if let Some(window) = self.window {
            writeln!(f, "window = {}", duration(window))?;
        }
        writeln!(f, "required = {}", self.required)
    }

    /// The ports guarded: the chosen listeners' (every listener's when none are named) and
    /// `ports`, each once, ascending. `bound` gives a listener's bound port by name (a port
    /// 0 in the file is the one the system chose).
    pub(crate) fn guarded_ports(&self, bound: &[(String, u16)]) -> Vec<u16> {
        let mut ports: Vec<u16> = bound
            .iter()
            .filter(|(name, _)| self.listeners.as_ref().is_none_or(|l| l.contains(name)))
            .map(|(_, port)| *port)
            .chain(self.ports.iter().copied())
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{listener, parsed, refused, refused_file};

    use super::*;

    fn xdp(fields: &str) -> XdpConfig {
        parsed(&format!("{}\n[xdp]\n{fields}", listener("")))
            .xdp
            .expect("an xdp section")
    }

    #[test]
    fn xdp_defaults_and_fields() {
        let x = xdp("interfaces = [\"eth0\"]");
        assert_eq!(
            x,
            XdpConfig {
                interfaces: vec!["eth0".to_owned()],
                mode: XdpMode::Native,
                listeners: None,
                ports: Vec::new(),
                memory: DEFAULT_XDP_MEMORY,
                window: None,
                required: false,
            }
        );
        let x = xdp(
            "interfaces = [\"eth0\", \"eth1.10\"]\nmode = \"generic\"\nlisteners = [\"l\"]\n\
             ports = [22, 53, 22]\nmemory = \"64KiB\"\nwindow = \"10s\"\nrequired = true",
        );
        assert_eq!(x.mode, XdpMode::Generic);
        assert_eq!(x.ports, [22, 53]);
        assert_eq!(x.memory, 64 << 10);
        assert_eq!(x.window, Some(Duration::from_secs(10)));
        assert_eq!(
            x.guarded_ports(&[("l".to_owned(), 8080), ("m".to_owned(), 9090)]),
            [22, 53, 8080]
        );
        assert_eq!(
            xdp("interfaces = [\"e\"]").guarded_ports(&[("m".to_owned(), 9)]),
            [9]
        );
    }

    #[test]
    fn xdp_refusals_are_located() {
        let with = |fields: &str| format!("{}\n[xdp]\n{fields}", listener(""));
        for (fields, needle) in [
            ("interfaces = []", "is empty"),
            ("interfaces = [\"a/b\"]", "not an interface name"),
            (
                "interfaces = [\"sixteen_letters_\"]",
                "not an interface name",
            ),
            ("interfaces = [\"e\", \"e\"]", "named twice"),
            ("interfaces = [\"e\"]\nmode = \"fast\"", "not an XDP mode"),
            (
                "interfaces = [\"e\"]\nlisteners = [\"nope\"]",
                "which no [[listener]] is",
            ),
            (
                "interfaces = [\"e\"]\nports = [0]",
                "not between 1 and 65535",
            ),
            (
                "interfaces = [\"e\"]\nports = [65536]",
                "not between 1 and 65535",
            ),
            (
                "interfaces = [\"e\"]\nmemory = \"1KiB\"",
                "not between 64KiB and 1GiB",
            ),
            (
                "interfaces = [\"e\"]\nmemory = \"2GiB\"",
                "not between 64KiB and 1GiB",
            ),
            (
                "interfaces = [\"e\"]\nwindow = \"2h\"",
                "the kernel's longest window",
            ),
            ("interfaces = [\"e\"]\nlisteners = []", "guards no port"),
            ("interfaces = [\"e\"]\nspeed = 1", "unknown field"),
            ("mode = \"native\"", "missing field `interfaces`"),
        ] {
            refused(&with(fields), needle);
        }
        refused("[xdp]\ninterfaces = [\"e\"]", "guards no port");
        // Located as `tollgate check` prints it: the file, the line and the column.
        let text = format!(
            "{}\n[xdp]\ninterfaces = [\"e\"]\nmode = \"fast\"\n",
            listener("")
        );
        let line = text.lines().position(|l| l.starts_with("mode")).unwrap() + 1;
        refused_file(
            "x.toml",
            &format!("{text}[[rule]]\nname = \"r\"\nlimits = [{{ rate = \"1/s\" }}]\n"),
            &[&format!("x.toml:{line}:8: `fast` is not an XDP mode")],
        );
    }
}
