//! What the code under test logs, as text (tests only).
//!
//! Operators act on log lines ("cluster: joined", "reload refused"), so a line that goes
//! missing or says the wrong thing is a defect a test should see. [`logged`] captures what a
//! closure logs; [`Capture`] what a whole async test logs, for a `current_thread` runtime
//! (the default of `#[tokio::test]`), whose tasks all run on the test's thread.

use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

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

    /// How many lines so far contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        self.text()
            .lines()
            .filter(|line| line.contains(needle))
            .count()
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
