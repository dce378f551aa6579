//! The replay's HTML report (`tollgate replay --html FILE`): one self-contained page, opened
//! from disk, that fetches nothing. Allowed, throttled and denied frames over time are drawn
//! as stacked bars in an inline SVG written here; the verdict totals, the rules' totals and
//! the top throttled sources and prefixes are tables.
//!
//! Everything that comes from the input (rule names, file names, addresses) is written through
//! [`Escaped`], and the page's Content-Security-Policy allows no script and no fetch at all,
//! so a rule named `<script>…` is shown as text and could not run even if it slipped through.

use std::fmt::{self, Display, Write as _};
use std::io::Write;
use std::path::Path;

use super::{Bucket, Report, bucket_width};

/// The page's style sheet, inlined.
const STYLE: &str = include_str!("report.css");

/// The chart's size in SVG user units (it scales to the page's width).
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 280.0;
/// Room for the axis labels, left and below; a little air above and right.
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 28.0;
const TOP: f64 = 12.0;
const RIGHT: f64 = 12.0;

/// `text` with `& < > " '` replaced by character references: safe in element content and in
/// quoted attribute values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Escaped<'a>(pub(crate) &'a str);

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            // The character found is one ASCII byte, so `at + 1` is a char boundary.
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

/// Writes the report on `capture`, replayed under `config`, as one HTML page to `out`.
///
/// # Errors
/// Only if `out` cannot be written.
pub(crate) fn write(
    report: &Report,
    capture: &Path,
    config: &Path,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    out.write_all(page(report, capture, config).as_bytes())
}

fn page(report: &Report, capture: &Path, config: &Path) -> String {
    let capture = capture.display().to_string();
    let config = config.display().to_string();
    let t = &report.totals;
    let mut html = String::new();
    // Writing into a String cannot fail: the `let _ =` below drop an always-`Ok`.
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'\">\n\
         <title>tollgate replay: {capture}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <h1>tollgate replay</h1>\n\
         <p class=\"summary\"><b>{capture}</b> under <b>{config}</b>: {frames} frame(s) over \
         {span:.3} s of capture time.</p>\n",
        capture = Escaped(&capture),
        config = Escaped(&config),
        frames = report.frames,
        span = report.span_ms as f64 / 1000.0,
    );
    let _ = write!(
        html,
        "<h2>Verdicts over time</h2>\n{}\n",
        chart(&report.timeline, report.span_ms)
    );
    html.push_str("<h2>Totals</h2>\n");
    table(
        &mut html,
        "totals",
        &["verdict", "frames"],
        [
            ("allowed", t.allowed),
            ("throttled", t.throttled),
            ("denied (listed)", t.denied_listed),
            ("denied (penalty)", t.denied_penalty),
            ("malformed", t.malformed),
            ("shadow rules over a limit", t.shadow),
        ]
        .iter()
        .map(|(name, n)| vec![(*name).to_owned(), n.to_string()]),
    );
    html.push_str("<h2>Rules</h2>\n");
    table(
        &mut html,
        "rules",
        &["rule", "throttled", "shadow over a limit"],
        report.rules.iter().map(|rule| {
            vec![
                rule.rule.clone(),
                rule.throttled.to_string(),
                rule.shadow.to_string(),
            ]
        }),
    );
    for (title, class, list) in [
        ("Top throttled sources", "sources", &report.top_sources),
        (
            "Top throttled prefixes (the key a limit counted)",
            "prefixes",
            &report.top_prefixes,
        ),
    ] {
        let _ = writeln!(html, "<h2>{title}</h2>");
        if list.is_empty() {
            html.push_str("<p class=\"none\">none throttled</p>\n");
            continue;
        }
        table(
            &mut html,
            class,
            &["key", "throttled"],
            list.iter().map(|(key, n)| vec![key.clone(), n.to_string()]),
        );
    }
    html.push_str("</body>\n</html>\n");
    html
}

/// A table with `class`, a header row and `rows`, every cell escaped; numbers align right.
fn table(html: &mut String, class: &str, header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let _ = write!(html, "<table class=\"{class}\">\n<tr>");
    for name in header {
        let _ = write!(html, "<th>{}</th>", Escaped(name));
    }
    html.push_str("</tr>\n");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let numeric = !cell.is_empty() && cell.bytes().all(|b| b.is_ascii_digit());
            let class = if numeric { " class=\"n\"" } else { "" };
            let _ = write!(html, "<td{class}>{}</td>", Escaped(&cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// The timeline as an SVG of stacked bars (allowed at the bottom, then throttled, then
/// denied), one slot per bucket of the capture's time, with its largest bucket's count on the
/// vertical axis and the capture's start and end below.
fn chart(timeline: &[Bucket], span_ms: u64) -> String {
    let width_ms = bucket_width(span_ms);
    let slots = span_ms / width_ms + 1;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot_w = plot_w / slots as f64;
    let highest = timeline
        .iter()
        .map(|b| b.allowed + b.throttled + b.denied)
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = plot_h / highest as f64;
    let base = TOP + plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"timeline\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-label=\"frames allowed, throttled and denied over the capture's time\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{base}\" x2=\"{right}\" y2=\"{base}\"/>\n\
         <line class=\"grid\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{right}\" y2=\"{TOP}\"/>\n\
         <line class=\"grid\" x1=\"{LEFT}\" y1=\"{mid}\" x2=\"{right}\" y2=\"{mid}\"/>\n\
         <text class=\"label\" x=\"{label_x}\" y=\"{top_y}\" text-anchor=\"end\">{highest}</text>\n\
         <text class=\"label\" x=\"{label_x}\" y=\"{mid_y}\" text-anchor=\"end\">{half}</text>\n\
         <text class=\"label\" x=\"{label_x}\" y=\"{base_y}\" text-anchor=\"end\">0</text>\n\
         <text class=\"label\" x=\"{LEFT}\" y=\"{below}\">0 s</text>\n\
         <text class=\"label\" x=\"{right}\" y=\"{below}\" text-anchor=\"end\">{end:.3} s</text>\n",
        right = LEFT + plot_w,
        mid = TOP + plot_h / 2.0,
        label_x = LEFT - 6.0,
        top_y = TOP + 4.0,
        mid_y = TOP + plot_h / 2.0 + 4.0,
        base_y = base + 4.0,
        half = highest as f64 / 2.0,
        below = HEIGHT - 8.0,
        end = span_ms as f64 / 1000.0,
    );
    for bucket in timeline {
        let x = LEFT + (bucket.start_ms / width_ms) as f64 * slot_w;
        let mut y = base;
        for (class, count) in [
            ("allowed", bucket.allowed),
            ("throttled", bucket.throttled),
            ("denied", bucket.denied),
        ] {
            if count == 0 {
                continue;
            }
            let h = count as f64 * scale;
            y -= h;
            let _ = writeln!(
                svg,
                "<rect class=\"{class}\" x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" \
                 height=\"{h:.2}\"><title>{start} ms: {count} {class}</title></rect>",
                w = (slot_w * 0.85).max(0.5),
                start = bucket.start_ms,
            );
        }
    }
    svg.push_str(
        "</svg>\n<p class=\"legend\"><span class=\"allowed\">allowed</span> \
                  <span class=\"throttled\">throttled</span> \
                  <span class=\"denied\">denied (listed, penalty, malformed)</span> \
                  per bucket of ",
    );
    let _ = write!(svg, "{width_ms} ms</p>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::replay::{RuleTotals, Totals};

    fn report(rule: &str) -> Report {
        Report {
            frames: 6,
            span_ms: 1_000,
            totals: Totals {
                allowed: 3,
                throttled: 2,
                denied_listed: 1,
                ..Totals::default()
            },
            rules: vec![RuleTotals {
                rule: rule.to_owned(),
                throttled: 2,
                shadow: 0,
            }],
            top_sources: vec![("203.0.113.9".to_owned(), 2)],
            top_prefixes: vec![("203.0.113.0/24".to_owned(), 2)],
            timeline: vec![
                Bucket {
                    start_ms: 0,
                    allowed: 3,
                    refused: 0,
                    throttled: 0,
                    denied: 0,
                },
                Bucket {
                    start_ms: 510,
                    allowed: 0,
                    refused: 3,
                    throttled: 2,
                    denied: 1,
                },
            ],
        }
    }

    #[test]
    fn markup_in_input_is_escaped() {
        assert_eq!(
            Escaped("<script>alert('x&y')</script>\"").to_string(),
            "&lt;script&gt;alert(&#39;x&amp;y&#39;)&lt;/script&gt;&quot;"
        );
        assert_eq!(Escaped("plain é").to_string(), "plain é");
        let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
        let html = page(
            &report(hostile),
            Path::new("a<b>.pcap"),
            Path::new("\"p\".toml"),
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("a&lt;b&gt;.pcap"), "{html}");
        assert!(html.contains("&quot;p&quot;.toml"), "{html}");
    }

    #[test]
    fn each_bucket_is_a_stack_of_its_verdicts() {
        let svg = chart(&report("r").timeline, 1_000);
        assert_eq!(svg.matches("<rect class=\"allowed\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<rect class=\"throttled\"").count(), 1);
        assert_eq!(svg.matches("<rect class=\"denied\"").count(), 1);
        // Both buckets hold 3 frames, the highest: each stack is the plot's full height.
        let plot_h = HEIGHT - TOP - BOTTOM;
        assert!(svg.contains(&format!("height=\"{plot_h:.2}\"")), "{svg}");
        let third = plot_h / 3.0;
        assert!(svg.contains(&format!("y=\"{TOP:.2}\" width")), "{svg}");
        assert!(svg.contains(&format!("height=\"{third:.2}\"")), "{svg}");
        // 1000 ms in buckets of 17 ms: the second bucket starts in slot 30 of 59.
        let slot_w = (WIDTH - LEFT - RIGHT) / 59.0;
        assert!(
            svg.contains(&format!("x=\"{:.2}\"", LEFT + 30.0 * slot_w)),
            "{svg}"
        );
    }
}
