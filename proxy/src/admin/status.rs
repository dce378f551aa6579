//! The status page: `GET /` from a browser (an `Accept` that names `text/html`) is one
//! self-contained page (`status.html`, its style inline, and its script `status.js` at
//! `GET /status.js`; nothing fetched from elsewhere) that polls `GET /status.json` every
//! second and draws what it reads:
//! decisions per second by verdict as a live chart, the listeners, the top offenders, and
//! each sketch's fill and stated overcount bound. curl and scripts (no `text/html` in
//! `Accept`) still get the plain-text index at `/`, which is also at `/index.txt` for
//! anyone.
//!
//! The page's script writes every value with `textContent`, never as markup, so a rule or
//! listener name that holds markup is shown as text; its Content-Security-Policy runs no
//! inline script or event handler and lets it fetch from this endpoint only. Both answers go through the admin's usual caps, timeouts
//! and token rules: beyond loopback the token is needed for them as for every endpoint (a
//! browser cannot send it, so reach such an admin through a tunnel or a proxy that adds it).

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use serde::Serialize;
use tollgate_filter::DurationText;
use tollgate_sketch::Stats;

use crate::shared::Shared;

/// The page, its style inline, served as is.
const PAGE: &str = include_str!("status.html");
/// The page's script, served at `/status.js`: apart from the page so that its policy can
/// forbid every inline script and event handler.
const SCRIPT: &str = include_str!("status.js");

/// Offenders the page lists.
const OFFENDERS: usize = 10;

/// The page's policy: its script from this endpoint (no inline script or event handler runs,
/// so markup that slipped into the page could not act), its inline style, fetches to this
/// endpoint only, no images, frames, forms or plugins.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                      connect-src 'self'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

/// Whether the request asks for a page (a browser's `Accept` names `text/html`; curl's
/// `*/*` does not).
pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|value| value.as_bytes().windows(9).any(|w| w == b"text/html"))
}

/// The page.
pub(super) fn page() -> Response<Full<Bytes>> {
    answer(
        PAGE.into(),
        "text/html; charset=utf-8",
        &[(header::CONTENT_SECURITY_POLICY, POLICY)],
    )
}

/// The page's script.
pub(super) fn script() -> Response<Full<Bytes>> {
    answer(SCRIPT.into(), "text/javascript; charset=utf-8", &[])
}

/// What the page draws, read now.
pub(super) fn json(shared: &Shared) -> Response<Full<Bytes>> {
    let status = Status::read(shared);
    match serde_json::to_string(&status) {
        Ok(body) => answer(body, "application/json", &[]),
        // The structure holds strings, numbers and lists only: serialising cannot fail.
        Err(err) => super::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
    }
}

fn answer(
    body: String,
    content_type: &'static str,
    extra: &[(header::HeaderName, &'static str)],
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    for (name, value) in extra {
        headers.insert(name.clone(), HeaderValue::from_static(value));
    }
    response
}

/// `GET /status.json`: counters since start (the page turns them into rates), gauges now.
#[derive(Debug, Serialize)]
struct Status {
    /// Seconds since the proxy started, by its monotonic clock (the rates' time base).
    uptime_seconds: f64,
    /// Decisions over all listeners since start.
    totals: Verdicts,
    /// Decisions the limiter could not make (let through: fail-open).
    decide_failures: u64,
    listeners: Vec<ListenerStatus>,
    /// The most rejected sources, most first.
    offenders: Vec<OffenderStatus>,
    /// The rate limits' sketches, one per window length.
    sketches: Vec<SketchStatus>,
    /// The penalty sketches, two per penalty length.
    penalties: Vec<SketchStatus>,
}

#[derive(Debug, Default, Serialize)]
struct Verdicts {
    allowed: u64,
    throttled: u64,
    denied: u64,
}

#[derive(Debug, Serialize)]
struct ListenerStatus {
    name: String,
    protocol: &'static str,
    address: String,
    #[serde(flatten)]
    verdicts: Verdicts,
    /// TCP connections open now (forwarded).
    open: i64,
    /// TCP rejections held now.
    held: i64,
    /// UDP client sessions now.
    sessions: i64,
}

#[derive(Debug, Serialize)]
struct OffenderStatus {
    source: String,
    /// Rejections counted (may overcount by `error`).
    rejected: u64,
    error: u64,
    /// Why it was last rejected: a rule's name or a refusal's reason.
    last: String,
}

#[derive(Debug, Serialize)]
struct SketchStatus {
    window: String,
    memory_bytes: usize,
    events_current: u64,
    events_previous: u64,
    /// Fraction of the Bloom front's bits set in the current window.
    front_fill: f64,
    front_false_positive_rate: f64,
    /// No estimate exceeds its true count by more, with probability `confidence`.
    overcount_bound: u64,
    confidence: f64,
}

impl SketchStatus {
    fn new(stats: &Stats) -> SketchStatus {
        SketchStatus {
            window: DurationText(stats.window).to_string(),
            memory_bytes: stats.memory_bytes,
            events_current: stats.events_current,
            events_previous: stats.events_previous,
            front_fill: stats.front_fill,
            front_false_positive_rate: stats.front_false_positive_rate,
            overcount_bound: stats.overcount_bound,
            confidence: stats.confidence,
        }
    }
}

impl Status {
    fn read(shared: &Shared) -> Status {
        let now = shared.now();
        let policy = shared.filter().policy();
        let mut totals = Verdicts::default();
        let listeners = shared
            .running()
            .now()
            .into_iter()
            .map(|running| {
                // The same counters the listener counts into (created when it started).
                let metrics = shared.metrics().listeners.listener(&running.name);
                let verdicts = Verdicts {
                    allowed: metrics.allowed.get(),
                    throttled: metrics.throttled.get(),
                    denied: metrics.denied.get(),
                };
                totals.allowed += verdicts.allowed;
                totals.throttled += verdicts.throttled;
                totals.denied += verdicts.denied;
                ListenerStatus {
                    name: running.name,
                    protocol: running.protocol.as_str(),
                    address: running.address.to_string(),
                    verdicts,
                    open: metrics.open.get(),
                    held: metrics.held.get(),
                    sessions: metrics.sessions.get(),
                }
            })
            .collect();
        Status {
            uptime_seconds: shared.uptime(now).as_secs_f64(),
            totals,
            decide_failures: shared.metrics().decide_failures.get(),
            listeners,
            offenders: shared
                .gate()
                .offenders()
                .top(OFFENDERS)
                .into_iter()
                .map(|offender| OffenderStatus {
                    source: offender.source.to_string(),
                    rejected: offender.count,
                    error: offender.error,
                    last: offender.last,
                })
                .collect(),
            sketches: policy
                .sketch_stats(now)
                .iter()
                .map(SketchStatus::new)
                .collect(),
            penalties: policy
                .penalty_stats(now)
                .iter()
                .map(SketchStatus::new)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn browsers_get_the_page_and_curl_the_text() {
        let chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
                        image/webp,*/*;q=0.8";
        assert!(wants_html(&accept(chromium)));
        assert!(wants_html(&accept("text/html")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("text/plain")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_page_fetches_nothing_from_elsewhere() {
        // Only this endpoint's own script and JSON; no external script, style, font or image.
        assert!(SCRIPT.contains("fetch(\"status.json\""));
        assert_eq!(PAGE.matches("src=").count(), 1);
        assert!(PAGE.contains("<script src=\"status.js\"></script>"));
        for outside in ["http:", "https:", "@import", "url(", "<img", "<link"] {
            assert!(!PAGE.contains(outside), "the page names `{outside}`");
            assert!(!SCRIPT.contains(outside), "the script names `{outside}`");
        }
        assert!(!SCRIPT.contains("innerHTML"), "values go in as text only");
    }

    /// The page and its script are never cached (a stale page after an upgrade would draw the
    /// new JSON with the old code, or show an operator old figures) nor sniffed into another
    /// type, and the page carries its policy (script and data from this endpoint only).
    #[test]
    fn the_page_and_script_are_not_cached_nor_sniffed_and_the_page_has_its_policy() {
        for (response, kind) in [
            (page(), "text/html; charset=utf-8"),
            (script(), "text/javascript; charset=utf-8"),
        ] {
            let headers = response.headers();
            assert_eq!(headers[header::CONTENT_TYPE], kind);
            assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{kind}");
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{kind}");
        }
        assert_eq!(page().headers()[header::CONTENT_SECURITY_POLICY], POLICY);
        assert!(
            !script()
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY)
        );
    }
}
