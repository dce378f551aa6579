//! `[kernel]`: the heaviest offenders dropped by nftables before they reach accept.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Errors, duration, quoted};

/// `[kernel]`: the heaviest offenders dropped by nftables before they reach accept (see
/// [`crate::kernel`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelConfig {
    /// The nftables table the proxy owns (family `inet`); one of that name is replaced at
    /// start and deleted at stop.
    pub table: String,
    /// How often the sets are updated (one transaction per update, only when something is new).
    pub interval: Duration,
    /// A source goes into the kernel once its estimate reaches `factor` times a limit.
    pub factor: f64,
    /// What the kernel does with a new connection from a listed source.
    pub action: KernelAction,
    /// Elements held at most in the two sets together; the heaviest go in first.
    pub max_elements: usize,
    /// Refuse to start when the table cannot be set up (no nft, no CAP_NET_ADMIN); otherwise
    /// the proxy runs without the fast path and says so.
    pub required: bool,
}

// Never NaN: `factor` is checked to be finite and at least 1.
impl Eq for KernelConfig {}

/// The default `[kernel] table`.
pub(crate) const DEFAULT_KERNEL_TABLE: &str = "tollgate";

impl Default for KernelConfig {
    fn default() -> KernelConfig {
        KernelConfig {
            table: DEFAULT_KERNEL_TABLE.to_owned(),
            interval: Duration::from_millis(100),
            factor: 1.0,
            action: KernelAction::Drop,
            max_elements: 65_536,
            required: false,
        }
    }
}

/// What the kernel does with a new TCP connection from a listed source (UDP datagrams from
/// one are always dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelAction {
    /// Drop the SYN: the client's connect times out.
    Drop,
    /// Answer the SYN with a TCP reset: the client's connect is refused at once.
    Reset,
}

impl KernelAction {
    /// The config file's word for it.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KernelAction::Drop => "drop",
            KernelAction::Reset => "reset",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKernel {
    table: Option<Spanned<String>>,
    interval: Option<Spanned<String>>,
    factor: Option<Spanned<f64>>,
    action: Option<Spanned<String>>,
    max_elements: Option<Spanned<usize>>,
    #[serde(default)]
    required: bool,
}

/// The `[kernel]` section, every field checked (see the README's kernel fast path).
pub(super) fn kernel(raw: &RawKernel, errors: &mut Errors<'_>) -> Option<KernelConfig> {
    let defaults = KernelConfig::default();
    // Each field is checked even after one failed, so every error is reported at once.
    let table = match &raw.table {
        Some(table) => errors.check(table, |t| nft_name(t)),
        None => Some(defaults.table),
    };
    let factor = match &raw.factor {
        Some(factor) => errors.check(factor, |&f| {
            if f.is_finite() && f >= 1.0 {
                Ok(f)
            } else {
                Err(format!(
                    "factor {f} is below 1: a source goes into the kernel only once over its limit"
                ))
            }
        }),
        None => Some(defaults.factor),
    };
    let action = match &raw.action {
        Some(action) => errors.check(action, |a| match a.as_str() {
            "drop" => Ok(KernelAction::Drop),
            "reset" => Ok(KernelAction::Reset),
            other => Err(format!(
                "`{other}` is not a kernel action: use \"drop\" or \"reset\""
            )),
        }),
        None => Some(defaults.action),
    };
    let max_elements = match &raw.max_elements {
        Some(max) => errors.check(max, |&m| {
            if (1..=1 << 24).contains(&m) {
                Ok(m)
            } else {
                Err(format!("max_elements {m} is not between 1 and 16777216"))
            }
        }),
        None => Some(defaults.max_elements),
    };
    let interval = errors.duration(raw.interval.as_ref(), defaults.interval);
    Some(KernelConfig {
        table: table?,
        interval,
        factor: factor?,
        action: action?,
        max_elements: max_elements?,
        required: raw.required,
    })
}

/// An nftables table name: a letter, then letters, digits and `_`, at most 64 bytes (it is
/// written into nft's input, so nothing else may pass).
pub(super) fn nft_name(text: &str) -> Result<String, String> {
    let mut chars = text.chars();
    let valid = text.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not a table name: use a letter, then letters, digits or `_` (at most 64)"
        ))
    }
}

impl KernelConfig {
    /// `[kernel]` as the config file writes it.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self;
        writeln!(f, "\n[kernel]\ntable = {}", quoted(&k.table))?;
        writeln!(f, "interval = {}", duration(k.interval))?;
        writeln!(f, "factor = {:?}", k.factor)?;
        writeln!(f, "action = {}", quoted(k.action.as_str()))?;
        writeln!(f, "max_elements = {}", k.max_elements)?;
        writeln!(f, "required = {}", k.required)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{kernel, refused};

    #[test]
    fn kernel_factor_and_elements_are_bounded() {
        let k = kernel("table = \"fast_path1\"\nfactor = 2.0\nmax_elements = 16777216");
        assert_eq!(
            (k.table.as_str(), k.factor, k.max_elements),
            ("fast_path1", 2.0, 1 << 24)
        );
        assert_eq!(kernel("max_elements = 1").max_elements, 1);
        for factor in ["0.5", "inf"] {
            refused(&format!("[kernel]\nfactor = {factor}"), "is below 1");
        }
        for max in [0, 16_777_217] {
            refused(&format!("[kernel]\nmax_elements = {max}"), "is not between");
        }
    }
}
