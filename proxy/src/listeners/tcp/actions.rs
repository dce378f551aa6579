//! Carrying out a rule's action on a TCP connection: close (FIN), reset (RST), reply (write a
//! rendered template, then close). `delay` holds the connection and decides again; it lives
//! with the connection's flow in `tcp.rs`. For TCP, `drop` closes like `close`: a connection
//! cannot be dropped silently once accepted.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::listeners::socket;

/// How long a closing connection's input is read and discarded, at most.
const LINGER: Duration = Duration::from_secs(1);
/// How much input a closing connection may send before it is cut.
const LINGER_BYTES: usize = 64 << 10;
/// How long writing a reply may take before the connection is cut.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// The reply written when a rule with `action = "reply"` names none: an HTTP 429 with the
/// standard Retry-After and the RateLimit headers (IETF httpapi draft), filled from the verdict.
pub(crate) const DEFAULT_REPLY: &str = "HTTP/1.1 429 Too Many Requests\r\n\
Content-Type: text/plain\r\n\
Content-Length: 20\r\n\
Retry-After: {retry_after}\r\n\
RateLimit-Policy: {limit};w={window}\r\n\
RateLimit-Limit: {limit}\r\n\
RateLimit-Remaining: 0\r\n\
RateLimit-Reset: {retry_after}\r\n\
Connection: close\r\n\
\r\n\
Too Many Requests.\r\n";

/// What a reply template is filled with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplyValues<'a> {
    /// The rule's name.
    pub(crate) rule: &'a str,
    /// The limit's count per window.
    pub(crate) limit: u64,
    /// The limit's window.
    pub(crate) window: Duration,
    /// The estimate that went over.
    pub(crate) estimate: u64,
    /// When to try again.
    pub(crate) retry_after: Duration,
}

/// Fills `template`'s placeholders: `{retry_after}` and `{window}` in whole seconds (rounded
/// up, as Retry-After wants), `{limit}`, `{estimate}`, `{rule}`. Other braces stay as written.
#[must_use]
pub(crate) fn render(template: &str, values: &ReplyValues<'_>) -> Vec<u8> {
    let seconds = |d: Duration| d.as_millis().div_ceil(1000).to_string();
    template
        .replace("{retry_after}", &seconds(values.retry_after))
        .replace("{window}", &seconds(values.window))
        .replace("{limit}", &values.limit.to_string())
        .replace("{estimate}", &values.estimate.to_string())
        .replace("{rule}", values.rule)
        .into_bytes()
}

/// Resets the connection: the client sees ECONNRESET at once, the proxy keeps no state.
pub(crate) fn reset(stream: TcpStream) {
    socket::reset_on_close(&stream);
    drop(stream);
}

/// Closes the connection with a FIN. Input the client already sent is read and discarded for
/// a short bound first: closing a socket with unread input makes the kernel send RST instead.
pub(crate) async fn close(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(LINGER, discard(&mut stream)).await;
}

/// Reads and discards `input` until it ends or fails, or [`LINGER_BYTES`] have come: a client
/// that keeps sending is cut by bytes, before [`LINGER`]. (Apart from `close` so the bound is
/// tested on an input in memory, with no clock.)
async fn discard(input: &mut (impl AsyncRead + Unpin)) {
    let mut sink = [0u8; 4096];
    let mut read = 0;
    while read < LINGER_BYTES {
        match input.read(&mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
}

/// Writes `bytes`, then closes with a FIN.
pub(crate) async fn reply(mut stream: TcpStream, bytes: &[u8]) {
    if tokio::time::timeout(REPLY_TIMEOUT, stream.write_all(bytes))
        .await
        .is_ok_and(|written| written.is_ok())
    {
        close(stream).await;
    } else {
        reset(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reply_is_a_complete_http_429() {
        let bytes = render(
            DEFAULT_REPLY,
            &ReplyValues {
                rule: "r",
                limit: 100,
                window: Duration::from_secs(10),
                estimate: 101,
                retry_after: Duration::from_millis(1500),
            },
        );
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(text.contains("Retry-After: 2\r\n"), "{text}");
        assert!(text.contains("RateLimit-Policy: 100;w=10\r\n"), "{text}");
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    /// A connected pair on loopback: the proxy's end (tokio) and the client's (blocking std).
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (listener.accept().await.unwrap().0, client)
    }

    /// What the client reads until the proxy's end is closed: the bytes and the FIN, or the
    /// error (a reset).
    fn read_to_end(mut client: std::net::TcpStream) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut got = Vec::new();
        client.read_to_end(&mut got).map(|_| got)
    }

    /// On a paused clock, with the client in a blocking task: the clock does not move while one
    /// runs, so the close cannot have waited out LINGER, however slow the machine.
    #[tokio::test(start_paused = true)]
    async fn close_sends_a_fin_and_discards_input_until_the_client_closes() {
        use std::io::{Read, Write};
        let (proxy, mut client) = pair().await;
        // Sent before the close: unread, it would turn the close into a reset.
        client.write_all(&[b'x'; 10_000]).unwrap();
        let closing = tokio::spawn(close(proxy));
        let (read, first_read) = tokio::sync::oneshot::channel();
        let (go_on, wait) = std::sync::mpsc::channel::<()>();
        let client = tokio::task::spawn_blocking(move || {
            let _ = read.send(client.read(&mut [0; 16]).map_err(|e| e.kind()));
            if wait.recv().is_ok() {
                client.write_all(b"more").unwrap();
            }
        });
        assert_eq!(first_read.await.unwrap(), Ok(0), "a FIN, not a reset");
        assert!(
            !closing.is_finished(),
            "still discarding the client's input"
        );
        go_on.send(()).unwrap();
        client.await.unwrap();
        closing.await.unwrap();
    }

    /// On a paused clock: time passes only while the runtime waits for the silent client.
    #[tokio::test(start_paused = true)]
    async fn close_lets_a_silent_client_go_after_linger() {
        let (proxy, _client) = pair().await;
        let started = tokio::time::Instant::now();
        tokio::time::timeout(2 * LINGER, close(proxy))
            .await
            .expect("closed after LINGER");
        assert_eq!(started.elapsed(), LINGER);
    }

    #[tokio::test]
    async fn discard_stops_at_exactly_linger_bytes_of_a_client_that_keeps_sending() {
        let input = vec![b'x'; LINGER_BYTES + 1];
        let mut unread = input.as_slice();
        discard(&mut unread).await;
        assert_eq!(unread.len(), 1, "read past LINGER_BYTES, or stopped short");
    }

    #[tokio::test]
    async fn reset_sends_a_reset_and_reply_its_bytes_then_a_fin() {
        let (proxy, client) = pair().await;
        reset(proxy);
        let err = read_to_end(client).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
        let (proxy, client) = pair().await;
        let reader = std::thread::spawn(move || read_to_end(client));
        reply(proxy, b"busy\r\n").await;
        assert_eq!(reader.join().unwrap().unwrap(), b"busy\r\n");
    }
}
