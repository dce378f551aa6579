//! Reading a policy from TOML: parsed once into typed values, or refused whole with every error
//! located by line and column. Never a partial policy.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use tollgate_sketch::RateSketch;
use toml::Spanned;

use crate::budget::{self, Counts};
use crate::key::RuleId;
use crate::prefix::Prefix;
use crate::rules::{Action, Cidr, Limit, ProtocolMatch, Rule, Weight};
use crate::units::{DurationText, parse_duration, parse_rate, parse_size};

/// The default sketch memory when the config names none.
pub const DEFAULT_MEMORY: usize = 64 << 20;

/// A checked policy file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Memory for all sketches together, in bytes.
    pub memory: usize,
    /// Memory given to the sketch of one period (limits of that period and penalties of that
    /// length share it), shortest period first; the periods not named split the rest evenly.
    pub periods: Vec<(Duration, usize)>,
    /// Sources never limited.
    pub allow: Vec<Cidr>,
    /// Sources always refused.
    pub deny: Vec<Cidr>,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

/// One problem in a config file, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error at byte `offset` of `text` (a config file), located by line and column.
    #[must_use]
    pub fn at(text: &str, offset: usize, message: impl Into<String>) -> ConfigError {
        let (line, column) = locate(text, offset);
        ConfigError {
            line,
            column,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// Every problem found in a config file (at least one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for error in &self.0 {
            if !first {
                writeln!(f)?;
            }
            first = false;
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    sketch: RawSketch,
    #[serde(default)]
    lists: RawLists,
    #[serde(default)]
    rule: Vec<RawRule>,
    // The proxy's sections: the proxy reads them from the same file (one file per deployment).
    #[serde(default, rename = "proxy")]
    _proxy: Option<IgnoredAny>,
    #[serde(default, rename = "admin")]
    _admin: Option<IgnoredAny>,
    #[serde(default, rename = "listener")]
    _listener: Option<IgnoredAny>,
    #[serde(default, rename = "cluster")]
    _cluster: Option<IgnoredAny>,
    #[serde(default, rename = "kernel")]
    _kernel: Option<IgnoredAny>,
    #[serde(default, rename = "xdp")]
    _xdp: Option<IgnoredAny>,
    #[serde(default, rename = "rls")]
    _rls: Option<IgnoredAny>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSketch {
    memory: Option<Spanned<String>>,
    periods: Option<Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLists {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Spanned<String>,
    #[serde(default)]
    protocol: ProtocolMatch,
    #[serde(default)]
    sources: Vec<Spanned<String>>,
    limits: Spanned<Vec<RawLimit>>,
    #[serde(default)]
    weight: Weight,
    #[serde(default)]
    action: Action,
    #[serde(default)]
    shadow: bool,
    penalty: Option<Spanned<String>>,
    delay: Option<Spanned<String>>,
    reply: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    rate: Spanned<String>,
    ipv4_prefix: Option<Spanned<u32>>,
    ipv6_prefix: Option<Spanned<u32>>,
}

/// Collects located errors while checking a config file's values (the proxy checks its own
/// sections with it too).
#[derive(Debug)]
pub struct Checker<'a> {
    text: &'a str,
    errors: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    /// A checker of values read from `text`.
    #[must_use]
    pub fn new(text: &'a str) -> Checker<'a> {
        Checker {
            text,
            errors: Vec::new(),
        }
    }

    /// Records `message` at `span` (byte offsets into the text).
    pub fn error(&mut self, span: Range<usize>, message: String) {
        self.errors
            .push(ConfigError::at(self.text, span.start, message));
    }

    /// `parse(value)`, or `None` with the error recorded at the value's place.
    pub fn check<T, V>(
        &mut self,
        value: &Spanned<V>,
        parse: impl FnOnce(&V) -> Result<T, String>,
    ) -> Option<T> {
        match parse(value.get_ref()) {
            Ok(parsed) => Some(parsed),
            Err(message) => {
                self.error(value.span(), message);
                None
            }
        }
    }

    /// The errors recorded so far, in the order found.
    #[must_use]
    pub fn into_errors(self) -> Vec<ConfigError> {
        self.errors
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn locate(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

impl Config {
    /// Parses and checks a policy.
    ///
    /// # Errors
    /// [`ConfigErrors`]: a TOML syntax error, an unknown field or value, or every value that is
    /// out of range (bad network, prefix longer than its family, zero or malformed rate,
    /// duplicate rule name, ...), each with its line and column.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::Config;
    /// let config = Config::parse(r#"
    ///     [[rule]]
    ///     name = "per-source"
    ///     limits = [{ rate = "100/10s" }]
    /// "#)?;
    /// assert_eq!(config.rules[0].limits[0].rate.count, 100);
    /// let err = Config::parse("[[rule]]\nname = \"x\"\nlimits = [{ rate = \"0/10s\" }]\n").unwrap_err();
    /// assert_eq!(err.0[0].line, 3);
    /// # Ok::<(), tollgate_filter::ConfigErrors>(())
    /// ```
    pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
        let raw: RawConfig = toml::from_str(text).map_err(|err| {
            let (line, column) = err.span().map_or((1, 1), |span| locate(text, span.start));
            ConfigErrors(vec![ConfigError {
                line,
                column,
                message: err.message().trim().to_owned(),
            }])
        })?;
        let mut checker = Checker::new(text);
        let memory = match &raw.sketch.memory {
            Some(memory) => checker
                .check(memory, |m| parse_size(m))
                .unwrap_or(DEFAULT_MEMORY),
            None => DEFAULT_MEMORY,
        };
        let cidrs = |list: &[Spanned<String>], checker: &mut Checker<'_>| -> Vec<Cidr> {
            list.iter()
                .filter_map(|c| checker.check(c, |c| Cidr::parse(c)))
                .collect()
        };
        let allow = cidrs(&raw.lists.allow, &mut checker);
        let deny = cidrs(&raw.lists.deny, &mut checker);
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut rules = Vec::new();
        for raw_rule in &raw.rule {
            let name = raw_rule.name.get_ref().clone();
            if let Some(first) =
                seen.insert(name.clone(), locate(text, raw_rule.name.span().start).0)
            {
                checker.error(
                    raw_rule.name.span(),
                    format!("duplicate rule name `{name}` (first used on line {first})"),
                );
            }
            if name.trim().is_empty() {
                checker.error(raw_rule.name.span(), "a rule name must not be empty".into());
            }
            let sources = cidrs(&raw_rule.sources, &mut checker);
            if raw_rule.limits.get_ref().is_empty() {
                checker.error(
                    raw_rule.limits.span(),
                    format!("rule `{name}` has no limits"),
                );
            }
            let limits = raw_rule
                .limits
                .get_ref()
                .iter()
                .filter_map(|limit| check_limit(limit, &mut checker))
                .collect();
            let penalty = raw_rule
                .penalty
                .as_ref()
                .and_then(|p| checker.check(p, |p| positive_duration(p, "a penalty")));
            let delay = raw_rule.delay.as_ref().and_then(|d| {
                only_with(&mut checker, d, raw_rule.action, Action::Delay, "delay");
                checker.check(d, |d| positive_duration(d, "a delay"))
            });
            let reply = raw_rule.reply.as_ref().map(|r| {
                only_with(&mut checker, r, raw_rule.action, Action::Reply, "reply");
                r.get_ref().clone()
            });
            rules.push(Rule {
                id: RuleId::from_name(&name),
                name,
                protocol: raw_rule.protocol,
                sources,
                limits,
                weight: raw_rule.weight,
                action: raw_rule.action,
                shadow: raw_rule.shadow,
                penalty,
                delay,
                reply,
            });
        }
        let periods = raw
            .sketch
            .periods
            .as_ref()
            .map(|periods| check_periods(periods, memory, &rules, &mut checker))
            .unwrap_or_default();
        let config = Config {
            memory,
            periods,
            allow,
            deny,
            rules,
        };
        if checker.errors.is_empty() {
            check_shares(&raw.sketch, &config, &mut checker);
        }
        if checker.errors.is_empty() {
            Ok(config)
        } else {
            let mut errors = checker.errors;
            errors.sort_by_key(|e| (e.line, e.column));
            Err(ConfigErrors(errors))
        }
    }
}

/// `[sketch] periods = { "1s" = "8MiB", ... }`: each a period some limit or penalty uses, with a
/// size, together within `memory`. Each error points at its own entry.
fn check_periods(
    raw: &Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>,
    memory: usize,
    rules: &[Rule],
    checker: &mut Checker<'_>,
) -> Vec<(Duration, usize)> {
    let used = |period: Duration| {
        rules.iter().any(|rule| {
            rule.penalty == Some(period) || rule.limits.iter().any(|l| l.rate.per == period)
        })
    };
    let mut periods = Vec::new();
    for (key, value) in raw.get_ref() {
        let name = key.get_ref();
        let Some(period) = checker.check(key, |k| {
            let period = parse_duration(k)?;
            if used(period) {
                Ok(period)
            } else {
                Err(format!(
                    "[sketch] periods: no limit or penalty has the period `{k}`"
                ))
            }
        }) else {
            continue;
        };
        let Some(size) = checker.check(value, |v| {
            v.as_str()
                .ok_or_else(|| {
                    format!("[sketch] periods: `{name}` needs a size such as \"8MiB\", not {v}")
                })
                .and_then(parse_size)
        }) else {
            continue;
        };
        if periods.iter().any(|(p, _)| *p == period) {
            checker.error(
                key.span(),
                format!("[sketch] periods: `{name}` names a period already given"),
            );
            continue;
        }
        periods.push((period, size));
    }
    periods.sort_unstable();
    let named: usize = periods.iter().map(|(_, size)| size).sum();
    if named > memory {
        checker.error(
            raw.span(),
            format!("[sketch] periods name {named} bytes, more than the memory of {memory}"),
        );
    }
    periods
}

/// Every sketch the rules need must fit its share of the memory: a share too small is refused
/// where it is set (its `[sketch] periods` entry, or `[sketch] memory` for the even split).
fn check_shares(raw: &RawSketch, config: &Config, checker: &mut Checker<'_>) {
    let shares = budget::shares(config.memory, &config.periods, &config.rules);
    let sketches = shares.len();
    // The even split: the most any unnamed sketch needs, and how many there are.
    let mut unnamed: Option<(usize, usize)> = None;
    let mut unnamed_count = 0;
    for share in &shares {
        let least = share.builder().min_memory_bytes();
        if !share.named {
            unnamed_count += 1;
            if share.bytes < least {
                let most = unnamed.map_or(least, |(_, most)| most.max(least));
                unnamed = Some((share.bytes, most));
            }
            continue;
        }
        // A penalty's two sketches have one entry: one error says it.
        if share.bytes >= least || share.counts == (Counts::Penalties { shifted: true }) {
            continue;
        }
        let window = DurationText(share.window);
        let entry = raw.periods.as_ref().and_then(|periods| {
            periods
                .get_ref()
                .iter()
                .find(|(k, _)| parse_duration(k.get_ref()) == Ok(share.window))
        });
        let (span, value) = entry.map_or((0..0, String::new()), |(_, value)| {
            (value.span(), value.get_ref().to_string())
        });
        checker.error(
            span,
            format!(
                "[sketch] periods: `{window}` = {value} gives its sketch {} bytes, less than \
                 the {least} bytes it needs",
                share.bytes
            ),
        );
    }
    if let Some((bytes, least)) = unnamed {
        let (span, value) = match &raw.memory {
            Some(memory) => (memory.span(), format!("\"{}\"", memory.get_ref())),
            None => (0..0, format!("the default {DEFAULT_MEMORY} bytes")),
        };
        let named: usize = config.periods.iter().map(|(_, size)| size).sum();
        checker.error(
            span,
            format!(
                "[sketch] memory = {value} leaves {bytes} bytes for each of {unnamed_count} \
                 sketches (of {sketches}: one per distinct limit period, two per penalty \
                 length), less than the {least} bytes a sketch needs: give at least {} bytes",
                named + least * unnamed_count
            ),
        );
    }
}

/// The largest count a limit may allow per period: one less than a counter's saturation
/// point ([`RateSketch::max_count`]), so that a source over it is seen over it.
pub const MAX_LIMIT: u64 = RateSketch::max_count() - 1;

fn check_limit(raw: &RawLimit, checker: &mut Checker<'_>) -> Option<Limit> {
    let rate = checker.check(&raw.rate, |r| {
        let rate = parse_rate(r)?;
        if rate.count > MAX_LIMIT {
            return Err(format!(
                "`{r}`: a limit of {} per period cannot be reached: the sketch's counters \
                 saturate at {} per window, so the largest limit is {MAX_LIMIT} per period \
                 (for `weight = \"bytes\"`, limit a shorter period)",
                rate.count,
                RateSketch::max_count()
            ));
        }
        Ok(rate)
    });
    let ipv4_prefix = match &raw.ipv4_prefix {
        Some(len) => checker.check(len, |len| Prefix::v4(*len).map_err(|e| e.to_string())),
        None => Some(Prefix::V4(32)),
    };
    let ipv6_prefix = match &raw.ipv6_prefix {
        Some(len) => checker.check(len, |len| Prefix::v6(*len).map_err(|e| e.to_string())),
        None => Some(Prefix::V6(64)),
    };
    Some(Limit {
        rate: rate?,
        ipv4_prefix: ipv4_prefix?,
        ipv6_prefix: ipv6_prefix?,
    })
}

fn positive_duration(text: &str, what: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!(
            "`{text}`: {what} must be longer than zero (or left out)"
        ));
    }
    Ok(duration)
}

/// Records an error if a rule sets `field`, which only `action` uses: a setting that would be
/// silently ignored is a mistake worth pointing at.
fn only_with<V>(
    checker: &mut Checker<'_>,
    value: &Spanned<V>,
    action: Action,
    needs: Action,
    field: &str,
) {
    if action != needs {
        checker.error(
            value.span(),
            format!(
                "`{field}` is only used with action = \"{}\" (this rule's action is \"{}\")",
                needs.as_str(),
                action.as_str()
            ),
        );
    }
}

/// Prints the policy as a config file that parses back to an equal [`Config`] (`tollgate check`
/// prints the parsed policy this way).
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let cidrs = |list: &[Cidr]| {
            let items: Vec<String> = list.iter().map(|c| quoted(&c.to_string())).collect();
            format!("[{}]", items.join(", "))
        };
        writeln!(f, "[sketch]\nmemory = {}", quoted(&self.memory.to_string()))?;
        let periods: Vec<String> = self
            .periods
            .iter()
            .map(|(period, size)| {
                format!(
                    "{} = {}",
                    quoted(&DurationText(*period).to_string()),
                    quoted(&size.to_string())
                )
            })
            .collect();
        writeln!(f, "periods = {{ {} }}", periods.join(", "))?;
        writeln!(
            f,
            "\n[lists]\nallow = {}\ndeny = {}",
            cidrs(&self.allow),
            cidrs(&self.deny)
        )?;
        for rule in &self.rules {
            writeln!(f, "\n[[rule]]\nname = {}", quoted(&rule.name))?;
            writeln!(f, "protocol = {}", quoted(rule.protocol.as_str()))?;
            writeln!(f, "sources = {}", cidrs(&rule.sources))?;
            writeln!(f, "limits = [")?;
            for limit in &rule.limits {
                writeln!(
                    f,
                    "  {{ rate = {}, ipv4_prefix = {}, ipv6_prefix = {} }},",
                    quoted(&limit.rate.to_string()),
                    limit.ipv4_prefix.len(),
                    limit.ipv6_prefix.len()
                )?;
            }
            writeln!(f, "]")?;
            writeln!(f, "weight = {}", quoted(rule.weight.as_str()))?;
            writeln!(f, "action = {}", quoted(rule.action.as_str()))?;
            writeln!(f, "shadow = {}", rule.shadow)?;
            if let Some(penalty) = rule.penalty {
                writeln!(
                    f,
                    "penalty = {}",
                    quoted(&DurationText(penalty).to_string())
                )?;
            }
            if let Some(delay) = rule.delay {
                writeln!(f, "delay = {}", quoted(&DurationText(delay).to_string()))?;
            }
            if let Some(reply) = &rule.reply {
                writeln!(f, "reply = {}", quoted(reply))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_of_exactly_what_the_sketches_need_is_enough_and_the_error_says_how_much() {
        let least = budget::Share {
            counts: Counts::Limits,
            window: Duration::from_secs(1),
            bytes: 0,
            named: false,
            reserves: false,
        }
        .builder()
        .min_memory_bytes();
        let text = |memory: usize| {
            format!(
                "[sketch]\nmemory = \"{memory}\"\n[[rule]]\nname = \"r\"\n\
                 limits = [{{ rate = \"10/1s\" }}, {{ rate = \"10/2s\" }}]\n"
            )
        };
        assert!(Config::parse(&text(2 * least)).is_ok());
        let errors = Config::parse(&text(2 * least - 2)).unwrap_err();
        let short = least - 1;
        assert_eq!(
            errors.0[0].message,
            format!(
                "[sketch] memory = \"{}\" leaves {short} bytes for each of 2 sketches (of 2: one \
                 per distinct limit period, two per penalty length), less than the {least} bytes \
                 a sketch needs: give at least {} bytes",
                2 * least - 2,
                2 * least
            )
        );
    }

    #[test]
    fn a_named_limit_period_too_small_is_refused_at_its_entry() {
        let text = "[sketch]\nmemory = \"1MiB\"\nperiods = { \"1s\" = \"100\" }\n\
                    [[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }]\n";
        let errors = Config::parse(text).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((errors[0].line, errors[0].column), (3, 20), "{errors:?}");
        assert!(errors[0].message.contains("`1s` = \"100\""), "{errors:?}");
    }

    #[test]
    fn periods_may_name_the_whole_memory_but_not_a_byte_more() {
        let text = |size: &str| {
            format!(
                "[sketch]\nmemory = \"1MiB\"\nperiods = {{ \"1s\" = \"{size}\" }}\n\
                 [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"10/1s\" }}]\n"
            )
        };
        let config = Config::parse(&text("1MiB")).unwrap();
        assert_eq!(config.periods, [(Duration::from_secs(1), 1 << 20)]);
        let errors = Config::parse(&text("1048577")).unwrap_err();
        assert_eq!(
            errors.0[0].message,
            "[sketch] periods name 1048577 bytes, more than the memory of 1048576"
        );
    }

    #[test]
    fn a_checker_hands_back_every_error_located_in_order() {
        let text = "[proxy]\nworkers = \"many\"\nbacklog = -1\n";
        let mut checker = Checker::new(text);
        let value =
            |start: usize, end: usize| Spanned::new(start..end, text[start..end].to_owned());
        let workers = text.find("\"many\"").unwrap();
        let backlog = text.find("-1").unwrap();
        assert_eq!(
            checker.check(&value(workers, workers + 6), |v| v
                .parse::<u32>()
                .map_err(|_| format!("{v} is not a number"))),
            None
        );
        assert_eq!(
            checker.check(&value(backlog, backlog + 2), |v| v
                .parse::<i32>()
                .map_err(|e| e.to_string())),
            Some(-1)
        );
        checker.error(backlog..backlog + 2, "a backlog must be positive".into());
        assert_eq!(
            checker.into_errors(),
            [
                ConfigError {
                    line: 2,
                    column: 11,
                    message: "\"many\" is not a number".into()
                },
                ConfigError {
                    line: 3,
                    column: 11,
                    message: "a backlog must be positive".into()
                },
            ]
        );
    }
}
