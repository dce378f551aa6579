//! `tollgate replay`: a capture run through a policy offline, at full speed, with the capture's
//! own timestamps as the clock, and a report of what the rules would have done.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tollgate_filter::{Config, DenyReason, Event, Policy, Throttle, Verdict, parse_frame};
use tollgate_sketch::Tick;

use crate::tools::capture::for_each_frame;

mod html;

/// Buckets in the allowed/throttled timeline (the width grows with the capture's length).
const TIMELINE_BUCKETS: u64 = 60;

/// The timeline's bucket length in milliseconds for a capture spanning `span_ms`: at most
/// [`TIMELINE_BUCKETS`] + 1 buckets, each at least 1 ms.
fn bucket_width(span_ms: u64) -> u64 {
    span_ms / TIMELINE_BUCKETS + 1
}

/// Verdict totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Totals {
    /// Frames allowed.
    pub(crate) allowed: u64,
    /// Frames over a limit.
    pub(crate) throttled: u64,
    /// Frames from a denied network.
    pub(crate) denied_listed: u64,
    /// Frames from sources serving a penalty.
    pub(crate) denied_penalty: u64,
    /// Frames that could not be parsed.
    pub(crate) malformed: u64,
    /// Frames a shadow rule found over a limit (also counted in their verdict).
    pub(crate) shadow: u64,
}

/// Per rule: what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RuleTotals {
    /// The rule's name.
    pub(crate) rule: String,
    /// Frames it throttled.
    pub(crate) throttled: u64,
    /// Frames it found over a limit as a shadow rule.
    pub(crate) shadow: u64,
}

/// One bucket of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Bucket {
    /// Start of the bucket, milliseconds after the first frame.
    pub(crate) start_ms: u64,
    /// Frames allowed in it.
    pub(crate) allowed: u64,
    /// Frames throttled or denied in it (`throttled + denied`).
    pub(crate) refused: u64,
    /// Frames over a limit in it.
    pub(crate) throttled: u64,
    /// Frames denied in it: a denied network, a penalty, or a frame that could not be parsed.
    pub(crate) denied: u64,
}

/// What became of one frame, for the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Throttled,
    Denied,
}

/// What the rules would have done with a capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Report {
    /// Frames read.
    pub(crate) frames: u64,
    /// From the first frame's timestamp to the last's, in milliseconds.
    pub(crate) span_ms: u64,
    /// Verdict totals.
    pub(crate) totals: Totals,
    /// Per rule.
    pub(crate) rules: Vec<RuleTotals>,
    /// The most throttled source addresses, most first.
    pub(crate) top_sources: Vec<(String, u64)>,
    /// The most throttled limit keys (the source masked to the limit's prefix), most first.
    pub(crate) top_prefixes: Vec<(String, u64)>,
    /// Allowed and refused over time.
    pub(crate) timeline: Vec<Bucket>,
}

/// Accumulates the report while the capture is read.
struct Tally<'a> {
    policy: &'a Policy,
    totals: Totals,
    per_rule: Vec<(u64, u64)>,
    sources: HashMap<IpAddr, u64>,
    prefixes: HashMap<String, u64>,
    /// `(offset from the first frame, outcome)` per frame, bucketed at the end.
    times: Vec<(Duration, Outcome)>,
}

impl Tally<'_> {
    fn frame(&mut self, at: Duration, bytes: &[u8]) {
        let now = Tick::from_duration(at);
        let (decision, source) = match parse_frame(bytes) {
            Ok(packet) => (
                self.policy.decide(&Event::from_packet(&packet), now),
                Some(packet.source),
            ),
            Err(_) => {
                self.totals.malformed += 1;
                self.times.push((at, Outcome::Denied));
                return;
            }
        };
        if let Some(shadow) = decision.shadow {
            self.totals.shadow += 1;
            self.per_rule[shadow.at.rule].1 += 1;
        }
        let outcome = match decision.verdict {
            Verdict::Allow => {
                self.totals.allowed += 1;
                Outcome::Allowed
            }
            Verdict::Throttle(throttle) => {
                self.totals.throttled += 1;
                self.per_rule[throttle.at.rule].0 += 1;
                if let Some(source) = source {
                    *self.sources.entry(source.addr()).or_default() += 1;
                    *self
                        .prefixes
                        .entry(self.prefix_of(&throttle, source))
                        .or_default() += 1;
                }
                Outcome::Throttled
            }
            Verdict::Deny(DenyReason::Penalty { .. }) => {
                self.totals.denied_penalty += 1;
                Outcome::Denied
            }
            Verdict::Deny(_) => {
                self.totals.denied_listed += 1;
                Outcome::Denied
            }
        };
        self.times.push((at, outcome));
    }

    /// The throttled limit's key as text: `203.0.113.0/24`.
    fn prefix_of(&self, throttle: &Throttle, source: tollgate_filter::Source) -> String {
        let limit = self
            .policy
            .rule(throttle.at.rule)
            .and_then(|rule| rule.limits.get(throttle.at.limit));
        match limit {
            Some(limit) => {
                let prefix = source.pick(limit.ipv4_prefix, limit.ipv6_prefix);
                format!("{}/{}", source.masked(prefix), prefix.len())
            }
            None => source.addr().to_string(),
        }
    }

    fn report(self, top: usize) -> Report {
        let span = self
            .times
            .iter()
            .map(|(at, _)| *at)
            .max()
            .unwrap_or_default();
        let width = bucket_width(span.as_millis() as u64);
        // Keyed by start, so frames out of timestamp order still land in one bucket each.
        let mut buckets: BTreeMap<u64, Bucket> = BTreeMap::new();
        for (at, outcome) in &self.times {
            let start_ms = at.as_millis() as u64 / width * width;
            let bucket = buckets.entry(start_ms).or_insert(Bucket {
                start_ms,
                allowed: 0,
                refused: 0,
                throttled: 0,
                denied: 0,
            });
            match outcome {
                Outcome::Allowed => bucket.allowed += 1,
                Outcome::Throttled => bucket.throttled += 1,
                Outcome::Denied => bucket.denied += 1,
            }
            bucket.refused = bucket.throttled + bucket.denied;
        }
        let timeline: Vec<Bucket> = buckets.into_values().collect();
        let most = |counts: Vec<(String, u64)>| {
            let mut counts = counts;
            counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            counts.truncate(top);
            counts
        };
        Report {
            frames: self.times.len() as u64,
            span_ms: span.as_millis() as u64,
            totals: self.totals,
            rules: self
                .policy
                .config()
                .rules
                .iter()
                .zip(&self.per_rule)
                .map(|(rule, (throttled, shadow))| RuleTotals {
                    rule: rule.name.clone(),
                    throttled: *throttled,
                    shadow: *shadow,
                })
                .collect(),
            top_sources: most(
                self.sources
                    .into_iter()
                    .map(|(a, n)| (a.to_string(), n))
                    .collect(),
            ),
            top_prefixes: most(self.prefixes.into_iter().collect()),
            timeline,
        }
    }
}

/// Replays `capture` through the policy in `config_path`, writing the report (text, or JSON
/// with `json`) to `out`, and with `html` also as a self-contained HTML page to that file.
/// Exit code 0, or 1 if the policy is invalid, the capture is cut short (the report of what was
/// read is written first) or the HTML file cannot be written (said on `out`).
///
/// # Errors
/// Only if `out` cannot be written.
pub(crate) fn replay(
    config_path: &Path,
    capture: &Path,
    top: usize,
    json: bool,
    html: Option<&Path>,
    out: &mut dyn Write,
) -> std::io::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    let policy = match std::fs::read_to_string(config_path)
        .map_err(|e| format!("cannot read the policy: {e}"))
        .and_then(|text| Config::parse(&text).map_err(|e| format!("invalid policy:\n{e}")))
        .and_then(|config| Policy::compile(config, None).map_err(|e| e.to_string()))
    {
        Ok(policy) => policy,
        Err(message) => {
            writeln!(out, "{}: {message}", config_path.display())?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let bytes = match std::fs::read(capture) {
        Ok(bytes) => bytes,
        Err(err) => {
            writeln!(out, "{}: cannot read the capture: {err}", capture.display())?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut tally = Tally {
        policy: &policy,
        totals: Totals::default(),
        per_rule: vec![(0, 0); policy.config().rules.len()],
        sources: HashMap::new(),
        prefixes: HashMap::new(),
        times: Vec::new(),
    };
    let mut first = None;
    let result = for_each_frame(&bytes, |timestamp, frame| {
        let origin = *first.get_or_insert(timestamp);
        tally.frame(timestamp.saturating_sub(origin), frame);
    });
    let report = tally.report(top);
    if json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        write_text(&report, capture, out)?;
    }
    let mut ok = true;
    if let Some(path) = html {
        let written = std::fs::File::create(path).and_then(|file| {
            let mut file = std::io::BufWriter::new(file);
            html::write(&report, capture, config_path, &mut file)?;
            file.flush()
        });
        if let Err(err) = written {
            writeln!(
                out,
                "{}: cannot write the HTML report: {err}",
                path.display()
            )?;
            ok = false;
        }
    }
    if let Err(err) = result {
        writeln!(out, "{}: {err}", capture.display())?;
        ok = false;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn write_text(report: &Report, capture: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    let t = &report.totals;
    writeln!(
        out,
        "{}: {} frame(s) over {:.3} s of capture time",
        capture.display(),
        report.frames,
        report.span_ms as f64 / 1000.0
    )?;
    writeln!(
        out,
        "verdicts: allowed {}, throttled {}, denied (listed) {}, denied (penalty) {}, malformed {}; shadow over {}",
        t.allowed, t.throttled, t.denied_listed, t.denied_penalty, t.malformed, t.shadow
    )?;
    for rule in &report.rules {
        writeln!(
            out,
            "rule {}: throttled {}, shadow over {}",
            rule.rule, rule.throttled, rule.shadow
        )?;
    }
    for (title, list) in [
        ("top throttled sources", &report.top_sources),
        ("top throttled prefixes", &report.top_prefixes),
    ] {
        writeln!(out, "{title}:")?;
        for (key, count) in list {
            writeln!(out, "  {count:>10}  {key}")?;
        }
    }
    writeln!(
        out,
        "timeline (ms from the first frame: allowed / refused):"
    )?;
    for bucket in &report.timeline {
        writeln!(
            out,
            "  {:>10}  {:>10} / {}",
            bucket.start_ms, bucket.allowed, bucket.refused
        )?;
    }
    Ok(())
}
