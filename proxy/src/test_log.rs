//! What the code under test logs, as text (tests only).
//!
//! Operators act on log lines ("cluster: joined", "reload refused"), so a line that goes
//! missing or says the wrong thing is a defect a test should see. [`logged`] captures what a
//! closure logs; [`Capture`] what a whole async test logs, for a `current_thread` runtime
//! (the default of `#[tokio::test]`), whose tasks all run on the test's thread.

use std::sync::{Arc, Mutex, OnceLock};

use tracing::level_filters::LevelFilter;
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Dispatch, Event, Metadata, Subscriber, span};

/// A subscriber that wants no line yet is asked about each one every time ("sometimes").
///
/// tracing caches whether a log line's call site is wanted the first time any thread reaches
/// it, and while only one subscriber exists it asks that thread's own: a test thread with no
/// capture reaching a line first switched it off for every capture in the process (seen: a
/// cluster sync test missed its "lost dataset" line in 2 of 36 runs under load). Kept alive
/// for the process beside the captures, this one makes every line ask the current thread's
/// subscriber each time it is hit, so a capture sees all of its thread's lines.
struct AskEachTime;

impl Subscriber for AskEachTime {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// Registers [`AskEachTime`] once for the process (registering it also makes every line
/// already cached ask again).
fn ask_each_time() {
    static KEPT: OnceLock<Dispatch> = OnceLock::new();
    KEPT.get_or_init(|| Dispatch::new(AskEachTime));
}

/// Bytes written by the subscriber, shared with the test that reads them.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        ask_each_time();
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish()
    }
}

/// What `run` logs on this thread, as text.
pub(crate) fn logged(run: impl FnOnce()) -> String {
    let sink = Sink::default();
    tracing::subscriber::with_default(sink.subscriber(), run);
    sink.text()
}

/// How many lines of `log` contain `needle`.
pub(crate) fn lines_with(log: &str, needle: &str) -> usize {
    log.lines().filter(|line| line.contains(needle)).count()
}

/// Everything logged on this thread while it lives.
pub(crate) struct Capture {
    sink: Sink,
    _guard: DefaultGuard,
}

impl Capture {
    /// Starts capturing this thread's log lines.
    pub(crate) fn start() -> Capture {
        let sink = Sink::default();
        let guard = tracing::subscriber::set_default(sink.subscriber());
        Capture {
            sink,
            _guard: guard,
        }
    }

    /// What was logged so far.
    pub(crate) fn text(&self) -> String {
        self.sink.text()
    }

    /// What was logged since `seen` bytes of it, moving `seen` to the end.
    pub(crate) fn since(&self, seen: &mut usize) -> String {
        let text = self.text();
        let new = text[*seen..].to_owned();
        *seen = text.len();
        new
    }

    /// How many lines so far contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        lines_with(&self.text(), needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closure_s_lines_are_captured_and_nothing_after() {
        let log = logged(|| tracing::warn!("inside"));
        tracing::warn!("outside");
        assert!(log.contains("WARN") && log.contains("inside"), "{log}");
        assert!(!log.contains("outside"), "{log}");
    }

    /// A line another thread (with no capture) reaches first is still captured here: run
    /// alone, with no other capture alive, it fails without [`AskEachTime`].
    #[test]
    fn a_line_first_reached_by_a_thread_without_capture_is_captured() {
        fn line() {
            tracing::warn!("reached first elsewhere");
        }
        let log = logged(|| {
            std::thread::spawn(line).join().unwrap();
            line();
        });
        assert_eq!(log.matches("reached first elsewhere").count(), 1, "{log:?}");
    }

    #[tokio::test]
    async fn an_async_test_s_lines_are_counted() {
        let capture = Capture::start();
        tokio::spawn(async { tracing::info!("cluster: joined") })
            .await
            .unwrap();
        tracing::info!("cluster: joined");
        assert_eq!(capture.count("cluster: joined"), 2, "{}", capture.text());
        assert_eq!(capture.count("cluster: alone"), 0);
    }
}
