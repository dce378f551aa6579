//! envoyproxy/ratelimit's YAML descriptor files, read unchanged into typed rules, or refused
//! whole with every error at `FILE:LINE:COL`.
//!
//! The format is the reference server's (its `README.md`, "The configuration format", and
//! `src/config/config_impl.go`): a `domain` and a tree of `descriptors`, each with a `key`,
//! an optional `value` (a trailing `*` makes it a prefix), an optional `rate_limit` (`unit`,
//! `requests_per_unit`, `unlimited`, `name`, `replaces: [{name}]`), `shadow_mode`,
//! `detailed_metric` and nested `descriptors`. The checks the reference makes are made here
//! with the same messages where it has one (empty key or domain, duplicate composite key at
//! one level, duplicate domain, a unit with `unlimited`, an invalid unit, an empty or
//! self-naming `replaces`). Past them, what the reference would accept but Tollgate does not
//! support is refused at its place, never ignored:
//!
//! - `unit: week`, `month` or `year` (a sliding window of a calendar unit is not defined);
//! - a `*` anywhere but at the end of a value, or in a key (the reference matches such
//!   patterns against the joined `key_value` text);
//! - `quota_mode`, `value_to_metric` or `share_threshold` set to true, and `metadata`;
//! - `requests_per_unit` above [`MAX_LIMIT`] (the sketch's counters saturate past it);
//! - YAML aliases, tags, and a second document in one file;
//! - any key the reference does not know at that level (the reference checks key names
//!   against one list for every level, and a known name at the wrong level is dropped).

use std::fmt;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::config::{ConfigError, MAX_LIMIT};

/// A checked set of descriptor files: one domain per file, no domain twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorConfig {
    /// The domains, in the order of their files.
    pub domains: Vec<Domain>,
}

/// One file's domain and its descriptor tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// The `domain` the requests name.
    pub name: String,
    /// The file it was read from (as given to [`DescriptorConfig::parse`]).
    pub file: String,
    /// The top-level descriptors, in file order.
    pub descriptors: Vec<DescriptorRule>,
}

/// One node of a domain's descriptor tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorRule {
    /// The entry key it matches.
    pub key: String,
    /// Which values of that key it matches.
    pub value: ValueMatch,
    /// The limit of a request whose last entry lands here, if any.
    pub rate_limit: Option<RateLimit>,
    /// Counted and reported, never enforced.
    pub shadow_mode: bool,
    /// The reference's per-value metrics (the proxy's metrics read it; matching does not).
    pub detailed_metric: bool,
    /// The nested descriptors, in file order.
    pub descriptors: Vec<DescriptorRule>,
    /// Where the descriptor starts in its file (1-based line).
    pub line: usize,
}

/// The values of its key a [`DescriptorRule`] matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueMatch {
    /// No `value`: any value (the reference's "default" match, tried last).
    Any,
    /// `value: text`: exactly `text` (tried first).
    Exact(String),
    /// `value: text*`: any value starting with `text` (tried second, in file order).
    Prefix(String),
}

/// A descriptor's `rate_limit` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// The limit, or none.
    pub limit: DescriptorLimit,
    /// `name`: what other rules' `replaces` refer to.
    pub name: Option<String>,
    /// `replaces`: the names of the rules this one drops from a request it also applies to.
    pub replaces: Vec<String>,
}

/// A `rate_limit`'s limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DescriptorLimit {
    /// `unlimited: true`: always OK, never counted.
    Unlimited,
    /// `requests_per_unit` per `unit`, over a sliding window of one unit.
    PerUnit {
        /// `requests_per_unit` (0 refuses every request, as in the reference).
        requests_per_unit: u32,
        /// `unit`.
        unit: Unit,
    },
}

/// A `rate_limit`'s `unit`: the length of its sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day (86,400 s).
    Day,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 4] = [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day];

    /// The window's length.
    #[must_use]
    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
        })
    }

    /// The reference's (and Envoy's proto's) lower-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
        }
    }
}

/// One problem in a descriptor file, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    /// The file (as given to [`DescriptorConfig::parse`]).
    pub file: String,
    /// Its line, column and message.
    pub error: ConfigError,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ConfigError {
            line,
            column,
            message,
        } = &self.error;
        write!(f, "{}:{line}:{column}: {message}", self.file)
    }
}

/// Every problem found in a set of descriptor files (at least one), each `FILE:LINE:COL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorErrors(pub Vec<FileError>);

impl fmt::Display for DescriptorErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DescriptorErrors {}

impl DescriptorConfig {
    /// Parses and checks `files`, each `(name, text)`: one domain per file.
    ///
    /// # Errors
    /// [`DescriptorErrors`]: every problem of every file, located (see the module docs).
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{DescriptorConfig, DescriptorLimit, Unit, ValueMatch};
    /// let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n";
    /// let config = DescriptorConfig::parse(&[("api.yaml", text)])?;
    /// let rule = &config.domains[0].descriptors[0];
    /// assert_eq!(rule.value, ValueMatch::Any);
    /// let limit = rule.rate_limit.as_ref().map(|r| r.limit);
    /// assert_eq!(limit, Some(DescriptorLimit::PerUnit { requests_per_unit: 100, unit: Unit::Minute }));
    /// let err = DescriptorConfig::parse(&[("bad.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight }\n")]).unwrap_err();
    /// assert_eq!(err.to_string(), "bad.yaml:4:25: invalid rate limit unit 'fortnight'");
    /// # Ok::<(), tollgate_filter::DescriptorErrors>(())
    /// ```
    pub fn parse(files: &[(&str, &str)]) -> Result<DescriptorConfig, DescriptorErrors> {
        let mut errors = Vec::new();
        let mut domains: Vec<(Domain, (usize, usize))> = Vec::new();
        for (file, text) in files {
            let mut reader = Reader {
                text,
                errors: Vec::new(),
            };
            if let Some((domain, at)) = reader.file() {
                if let Some((first, _)) = domains.iter().find(|(d, _)| d.name == domain.name) {
                    reader.errors.push(ConfigError {
                        line: at.0,
                        column: at.1,
                        message: format!(
                            "duplicate domain '{}' in config file (first in {})",
                            domain.name, first.file
                        ),
                    });
                } else if reader.errors.is_empty() {
                    domains.push((
                        Domain {
                            file: (*file).to_owned(),
                            ..domain
                        },
                        at,
                    ));
                }
            }
            errors.extend(reader.errors.into_iter().map(|error| FileError {
                file: (*file).to_owned(),
                error,
            }));
        }
        if errors.is_empty() {
            Ok(DescriptorConfig {
                domains: domains.into_iter().map(|(d, _)| d).collect(),
            })
        } else {
            Err(DescriptorErrors(errors))
        }
    }
}

/// Reads one file's nodes, collecting located errors (the `Checker` pattern of the policy
/// file: every error found, not the first).
struct Reader<'a> {
    text: &'a str,
    errors: Vec<ConfigError>,
}

/// The 1-based line and column (in characters) of the `index`th character of `text`, counting
/// lines by `\n` as editors and the other config errors do. The YAML scanner's own line and
/// column disagree with that (the fuzzer found errors placed a line past the end of the text,
/// and columns past the end of their line), so only its character index is used; an index
/// past the end is the end.
fn locate(text: &str, index: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for c in text.chars().take(index) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

impl<'a> Reader<'a> {
    /// Line and column of `node`'s start.
    fn place(&self, node: &MarkedYaml<'_>) -> (usize, usize) {
        locate(self.text, node.span.start.index())
    }

    fn error(&mut self, node: &MarkedYaml<'_>, message: impl Into<String>) {
        let (line, column) = self.place(node);
        self.errors.push(ConfigError {
            line,
            column,
            message: message.into(),
        });
    }

    /// The file's domain (its name's place beside it), or `None` with the errors recorded.
    fn file(&mut self) -> Option<(Domain, (usize, usize))> {
        let documents = match MarkedYaml::load_from_str(self.text) {
            Ok(documents) => documents,
            Err(err) => {
                let (line, column) = locate(self.text, err.marker().index());
                self.errors.push(ConfigError {
                    line,
                    column,
                    message: format!("error loading config file: {}", err.info()),
                });
                return None;
            }
        };
        if let Some(second) = documents.get(1) {
            self.error(second, "a second YAML document: one domain per file");
        }
        let Some(root) = documents.first() else {
            self.errors.push(ConfigError {
                line: 1,
                column: 1,
                message: "config file cannot have empty domain".to_owned(),
            });
            return None;
        };
        let fields = self.mapping(root, &["domain", "descriptors"], &[])?;
        let mut name = None;
        let mut descriptors = Vec::new();
        for (key, value) in fields {
            match key {
                "domain" => name = Some((self.string(value), self.place(value))),
                _ => descriptors = self.descriptors(value),
            }
        }
        let (name, at) = match name {
            Some((Some(name), at)) if !name.is_empty() => (name, at),
            Some((Some(_), at)) => {
                self.errors.push(ConfigError {
                    line: at.0,
                    column: at.1,
                    message: "config file cannot have empty domain".to_owned(),
                });
                return None;
            }
            Some((None, _)) => return None,
            None => {
                self.error(root, "config file cannot have empty domain");
                return None;
            }
        };
        Some((
            Domain {
                name,
                file: String::new(),
                descriptors,
            },
            at,
        ))
    }

    /// A list of descriptors (null reads as none, as in the reference).
    fn descriptors(&mut self, node: &MarkedYaml<'a>) -> Vec<DescriptorRule> {
        let items = match &node.data {
            YamlData::Value(Scalar::Null) => return Vec::new(),
            YamlData::Sequence(items) => items,
            _ => {
                self.error(node, "expected a list of descriptors");
                return Vec::new();
            }
        };
        let mut rules: Vec<DescriptorRule> = Vec::new();
        let mut composites: Vec<String> = Vec::new();
        for item in items {
            let Some(rule) = self.descriptor(item) else {
                continue;
            };
            // The reference's map key at one level: `key`, or `key_value`.
            let composite = match &rule.value {
                ValueMatch::Any => rule.key.clone(),
                ValueMatch::Exact(v) => format!("{}_{v}", rule.key),
                ValueMatch::Prefix(p) => format!("{}_{p}*", rule.key),
            };
            if composites.contains(&composite) {
                self.error(
                    item,
                    format!("duplicate descriptor composite key '{composite}'"),
                );
                continue;
            }
            composites.push(composite);
            rules.push(rule);
        }
        rules
    }

    fn descriptor(&mut self, node: &MarkedYaml<'a>) -> Option<DescriptorRule> {
        const KNOWN: &[&str] = &[
            "key",
            "value",
            "rate_limit",
            "descriptors",
            "shadow_mode",
            "detailed_metric",
        ];
        const UNSUPPORTED: &[&str] = &[
            "quota_mode",
            "value_to_metric",
            "share_threshold",
            "metadata",
        ];
        let fields = self.mapping(node, KNOWN, UNSUPPORTED)?;
        let errors = self.errors.len();
        let mut rule = DescriptorRule {
            key: String::new(),
            value: ValueMatch::Any,
            rate_limit: None,
            shadow_mode: false,
            detailed_metric: false,
            descriptors: Vec::new(),
            line: self.place(node).0,
        };
        let mut has_key = false;
        for (key, value) in fields {
            match key {
                "key" => {
                    let Some(text) = self.string(value) else {
                        continue;
                    };
                    if text.contains('*') {
                        self.error(
                            value,
                            "a '*' in a key is not supported (only a trailing '*' in a value)",
                        );
                    }
                    has_key = !text.is_empty();
                    rule.key = text;
                }
                "value" => {
                    let Some(text) = self.string(value) else {
                        continue;
                    };
                    rule.value = match text.find('*') {
                        None if text.is_empty() => ValueMatch::Any,
                        None => ValueMatch::Exact(text),
                        Some(at) if at + 1 == text.len() => {
                            ValueMatch::Prefix(text[..at].to_owned())
                        }
                        Some(_) => {
                            self.error(
                                value,
                                "a '*' inside a value is not supported (only a trailing '*')",
                            );
                            continue;
                        }
                    };
                }
                "rate_limit" => rule.rate_limit = self.rate_limit(value),
                "descriptors" => rule.descriptors = self.descriptors(value),
                "shadow_mode" => rule.shadow_mode = self.boolean(value).unwrap_or(false),
                "detailed_metric" => rule.detailed_metric = self.boolean(value).unwrap_or(false),
                "metadata" => self.error(value, "'metadata' is not supported"),
                _ => {
                    // quota_mode, value_to_metric, share_threshold: false is what absent means.
                    if self.boolean(value) == Some(true) {
                        self.error(value, format!("'{key}: true' is not supported"));
                    }
                }
            }
        }
        if !has_key {
            self.error(node, "descriptor has empty key");
        }
        (self.errors.len() == errors).then_some(rule)
    }

    fn rate_limit(&mut self, node: &MarkedYaml<'a>) -> Option<RateLimit> {
        if matches!(node.data, YamlData::Value(Scalar::Null)) {
            return None;
        }
        const KNOWN: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
        let fields = self.mapping(node, KNOWN, &[])?;
        let errors = self.errors.len();
        let mut unit: Option<(String, &MarkedYaml<'_>)> = None;
        let mut requests_per_unit = 0;
        let mut unlimited = false;
        let mut name = None;
        let mut replaces: Vec<(String, &MarkedYaml<'_>)> = Vec::new();
        for (key, value) in fields {
            match key {
                "unit" => unit = self.string(value).map(|u| (u, value)),
                "requests_per_unit" => requests_per_unit = self.count(value).unwrap_or(0),
                "unlimited" => unlimited = self.boolean(value).unwrap_or(false),
                "name" => name = self.string(value).filter(|n| !n.is_empty()),
                _ => replaces = self.replaces(value),
            }
        }
        // The reference upper-cases the unit and looks it up in the proto's enum.
        let limit = match (unlimited, unit.filter(|(text, _)| !text.is_empty())) {
            // The reference refuses a valid unit here and drops an invalid one: both refused.
            (true, Some((_, at))) => {
                self.error(at, "should not specify rate limit unit when unlimited");
                None
            }
            (true, None) => Some(DescriptorLimit::Unlimited),
            (false, Some((text, at))) => {
                let upper = text.to_ascii_uppercase();
                match Unit::ALL
                    .into_iter()
                    .find(|u| u.name().eq_ignore_ascii_case(&upper))
                {
                    Some(unit) => Some(DescriptorLimit::PerUnit {
                        requests_per_unit,
                        unit,
                    }),
                    None if matches!(upper.as_str(), "WEEK" | "MONTH" | "YEAR") => {
                        self.error(
                            at,
                            format!(
                                "unit '{text}' is not supported: a sliding window needs a fixed \
                                 length (second, minute, hour or day)"
                            ),
                        );
                        None
                    }
                    None => {
                        self.error(at, format!("invalid rate limit unit '{text}'"));
                        None
                    }
                }
            }
            (false, None) => {
                self.error(node, "invalid rate limit unit ''");
                None
            }
        };
        for (replaced, at) in &replaces {
            if replaced.is_empty() {
                self.error(at, "should not have an empty replaces entry");
            } else if name.as_deref() == Some(replaced.as_str()) {
                self.error(at, "replaces should not contain name of same descriptor");
            }
        }
        let limit = limit?;
        (self.errors.len() == errors).then(|| RateLimit {
            limit,
            name,
            replaces: replaces.into_iter().map(|(n, _)| n).collect(),
        })
    }

    fn replaces<'n>(&mut self, node: &'n MarkedYaml<'a>) -> Vec<(String, &'n MarkedYaml<'a>)> {
        let items = match &node.data {
            YamlData::Value(Scalar::Null) => return Vec::new(),
            YamlData::Sequence(items) => items,
            _ => {
                self.error(node, "expected a list of {name: ...}");
                return Vec::new();
            }
        };
        let mut names = Vec::new();
        for item in items {
            let Some(fields) = self.mapping(item, &["name"], &[]) else {
                continue;
            };
            let name = fields
                .first()
                .and_then(|(_, value)| self.string(value))
                .unwrap_or_default();
            names.push((name, item));
        }
        names
    }

    /// The fields of a mapping whose keys are all in `known` (or `unsupported`, recorded as
    /// unsupported where their value is not the default), each known key once (the parser
    /// refuses a duplicate key). `None` if `node` is not a mapping.
    fn mapping<'n>(
        &mut self,
        node: &'n MarkedYaml<'a>,
        known: &[&'static str],
        unsupported: &[&'static str],
    ) -> Option<Vec<(&'static str, &'n MarkedYaml<'a>)>> {
        let YamlData::Mapping(map) = &node.data else {
            self.not_plain(node, "expected a mapping");
            return None;
        };
        let mut fields = Vec::new();
        for (key, value) in map {
            let YamlData::Value(Scalar::String(name)) = &key.data else {
                self.error(key, "config error, key is not of type string");
                continue;
            };
            match known
                .iter()
                .chain(unsupported)
                .find(|k| **k == name.as_ref())
            {
                Some(k) => fields.push((*k, value)),
                None => self.error(key, format!("config error, unknown key '{name}'")),
            }
        }
        Some(fields)
    }

    /// Records `message` at `node`, or what an alias or tag there is.
    fn not_plain(&mut self, node: &MarkedYaml<'_>, message: &str) {
        match node.data {
            YamlData::Alias(_) => self.error(node, "YAML aliases are not supported"),
            YamlData::Tagged(..) => self.error(node, "YAML tags are not supported"),
            _ => self.error(node, message),
        }
    }

    /// A scalar as the reference's YAML library reads it into a string: its text as written
    /// (so `value: 010` is `010`); null is empty.
    fn string(&mut self, node: &MarkedYaml<'_>) -> Option<String> {
        match &node.data {
            YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
            YamlData::Value(Scalar::Null) => Some(String::new()),
            YamlData::Value(_) => Some(self.source(node).to_owned()),
            _ => {
                self.not_plain(node, "expected a string");
                None
            }
        }
    }

    /// A boolean as YAML 1.1 (the reference's library) reads one: also yes/no/on/off
    /// unquoted. Null is false.
    fn boolean(&mut self, node: &MarkedYaml<'_>) -> Option<bool> {
        match &node.data {
            YamlData::Value(Scalar::Boolean(b)) => Some(*b),
            YamlData::Value(Scalar::Null) => Some(false),
            YamlData::Value(Scalar::String(s)) if !self.quoted(node) => match s.as_ref() {
                "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
                "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
                _ => {
                    self.error(node, format!("expected true or false, not '{s}'"));
                    None
                }
            },
            _ => {
                self.not_plain(node, "expected true or false");
                None
            }
        }
    }

    /// A whole number of requests: at most [`MAX_LIMIT`] (the reference takes any `u32`).
    fn count(&mut self, node: &MarkedYaml<'_>) -> Option<u32> {
        match &node.data {
            YamlData::Value(Scalar::Integer(n)) => match u32::try_from(*n) {
                Ok(n) if u64::from(n) <= MAX_LIMIT => Some(n),
                Ok(n) => {
                    self.error(
                        node,
                        format!(
                            "requests_per_unit {n} is not supported: the sketch's counts \
                             saturate past {MAX_LIMIT} per window"
                        ),
                    );
                    None
                }
                Err(_) => {
                    self.error(node, format!("requests_per_unit {n} is not a u32"));
                    None
                }
            },
            YamlData::Value(Scalar::Null) => Some(0),
            _ => {
                self.not_plain(node, "expected a whole number");
                None
            }
        }
    }

    /// The node's text as written (its span counts characters, not bytes).
    fn source(&self, node: &MarkedYaml<'_>) -> &'a str {
        let byte = |chars: usize| {
            self.text
                .char_indices()
                .nth(chars)
                .map_or(self.text.len(), |(at, _)| at)
        };
        let (start, end) = (byte(node.span.start.index()), byte(node.span.end.index()));
        self.text
            .get(start..end.max(start))
            .unwrap_or_default()
            .trim()
    }

    fn quoted(&self, node: &MarkedYaml<'_>) -> bool {
        matches!(self.source(node).chars().next(), Some('"' | '\''))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(files: &[(&str, &str)]) -> Vec<String> {
        match DescriptorConfig::parse(files) {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(err) => err.0.iter().map(ToString::to_string).collect(),
        }
    }

    fn one(text: &str) -> Domain {
        let mut config = DescriptorConfig::parse(&[("f.yaml", text)]).unwrap();
        config.domains.remove(0)
    }

    /// The reference README's example 1, read unchanged.
    #[test]
    fn the_readme_example_reads_as_written() {
        let domain = one(
            "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n",
        );
        assert_eq!(domain.name, "mongo_cps");
        assert_eq!(domain.descriptors.len(), 2);
        assert_eq!(
            domain.descriptors[0].value,
            ValueMatch::Exact("users".into())
        );
        assert_eq!(domain.descriptors[1].line, 9);
    }

    #[test]
    fn values_wildcards_booleans_and_replaces_read_as_the_reference_reads_them() {
        let domain = one(
            "domain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    shadow_mode: yes\n    rate_limit: {unit: HOUR, requests_per_unit: 7, name: a, replaces: [{name: b}]}\n  - key: code\n    value: 010\n    detailed_metric: true\n  - key: open\n    rate_limit: {unlimited: true}\n",
        );
        let [wild, code, open] = &domain.descriptors[..] else {
            panic!("{domain:?}")
        };
        assert_eq!(wild.value, ValueMatch::Prefix("/api/".into()));
        assert!(wild.shadow_mode);
        let limit = wild.rate_limit.as_ref().unwrap();
        assert_eq!(
            limit.limit,
            DescriptorLimit::PerUnit {
                requests_per_unit: 7,
                unit: Unit::Hour
            }
        );
        assert_eq!(limit.name.as_deref(), Some("a"));
        assert_eq!(limit.replaces, ["b"]);
        assert_eq!(code.value, ValueMatch::Exact("010".into()));
        assert!(code.detailed_metric);
        assert_eq!(
            open.rate_limit.as_ref().unwrap().limit,
            DescriptorLimit::Unlimited
        );
    }

    /// Bad files, each error at FILE:LINE:COL, every one of them (not the first only).
    #[test]
    fn bad_files_are_refused_at_file_line_and_column() {
        let bad = "domain: d\ndescriptors:\n  - key: a\n    colour: red\n    rate_limit:\n      unit: week\n  - key: b\n    value: x*y\n  - key: a\n    value: v\n    rate_limit: {unlimited: true, unit: second}\n  - key: a\n    value: v\n";
        assert_eq!(
            errors(&[("bad.yaml", bad)]),
            [
                "bad.yaml:4:5: config error, unknown key 'colour'",
                "bad.yaml:6:13: unit 'week' is not supported: a sliding window needs a fixed length (second, minute, hour or day)",
                "bad.yaml:8:12: a '*' inside a value is not supported (only a trailing '*')",
                "bad.yaml:11:41: should not specify rate limit unit when unlimited",
            ]
        );
        assert_eq!(
            errors(&[(
                "twice.yaml",
                "domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: b\n  - key: a\n    value: v\n"
            )]),
            ["twice.yaml:6:5: duplicate descriptor composite key 'a_v'"]
        );
        assert_eq!(
            errors(&[("syntax.yaml", "domain: d\ndescriptors:\n  - key: [a\n")]),
            [
                "syntax.yaml:4:1: error loading config file: while parsing a flow sequence, expected ',' or ']'"
            ]
        );
        // Found by the fuzzer (tests/fuzz/regressions/descriptors): the scanner placed an error
        // at the end of the input a line past the text; places now come from its character
        // index.
        assert_eq!(
            errors(&[("end.yaml", "[")]),
            [
                "end.yaml:1:2: error loading config file: while parsing a node, did not find expected node content"
            ]
        );
        assert_eq!(
            errors(&[("cr.yaml", "domain: d\rdescriptors: [a: b: c]\n")]),
            [
                "cr.yaml:1:29: error loading config file: while parsing a flow mapping, did not find expected ',' or '}'"
            ]
        );
        assert_eq!(
            errors(&[("dup.yaml", "domain: d\ndomain: e\n")]),
            ["dup.yaml:2:1: error loading config file: duplicated key in mapping"]
        );
        assert_eq!(
            errors(&[
                ("a.yaml", "domain: d\n"),
                ("b.yaml", "# again\ndomain: d\n")
            ]),
            ["b.yaml:2:9: duplicate domain 'd' in config file (first in a.yaml)"]
        );
        assert_eq!(
            errors(&[(
                "e.yaml",
                "descriptors:\n  - key: \"\"\n    share_threshold: true\n"
            )]),
            [
                "e.yaml:3:22: 'share_threshold: true' is not supported",
                "e.yaml:2:5: descriptor has empty key",
                "e.yaml:1:1: config file cannot have empty domain",
            ]
        );
        assert_eq!(
            errors(&[(
                "r.yaml",
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 99999999, name: n, replaces: [{name: n}]}\n"
            )]),
            [
                "r.yaml:4:48: requests_per_unit 99999999 is not supported: the sketch's counts saturate past 16777214 per window",
                "r.yaml:4:78: replaces should not contain name of same descriptor",
            ]
        );
    }
}
