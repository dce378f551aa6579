//! Carrying out a rule's action on a TCP connection: close (FIN), reset (RST), reply (write a
//! rendered template, then close). `delay` holds the connection and decides again; it lives
//! with the connection's flow in `tcp.rs`. For TCP, `drop` closes like `close`: a connection
//! cannot be dropped silently once accepted.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
pub const DEFAULT_REPLY: &str = "HTTP/1.1 429 Too Many Requests\r\n\
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
pub struct ReplyValues<'a> {
    /// The rule's name.
    pub rule: &'a str,
    /// The limit's count per window.
    pub limit: u64,
    /// The limit's window.
    pub window: Duration,
    /// The estimate that went over.
    pub estimate: u64,
    /// When to try again.
    pub retry_after: Duration,
}

/// Fills `template`'s placeholders: `{retry_after}` and `{window}` in whole seconds (rounded
/// up, as Retry-After wants), `{limit}`, `{estimate}`, `{rule}`. Other braces stay as written.
#[must_use]
pub fn render(template: &str, values: &ReplyValues<'_>) -> Vec<u8> {
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
pub fn reset(stream: TcpStream) {
    socket::reset_on_close(&stream);
    drop(stream);
}

/// Closes the connection with a FIN. Input the client already sent is read and discarded for
/// a short bound first: closing a socket with unread input makes the kernel send RST instead.
pub async fn close(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut read = 0;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

/// Writes `bytes`, then closes with a FIN.
pub async fn reply(mut stream: TcpStream, bytes: &[u8]) {
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

    #[tokio::test]
    async fn close_sends_a_fin_and_discards_input_until_the_client_closes() {
        use std::io::{Read, Write};
        let (proxy, mut client) = pair().await;
        // Sent before the close: unread, it would turn the close into a reset.
        client.write_all(&[b'x'; 10_000]).unwrap();
        let closing = tokio::spawn(close(proxy));
        let mut client = tokio::task::spawn_blocking(move || {
            assert_eq!(client.read(&mut [0; 16]).unwrap(), 0, "a FIN");
            client
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !closing.is_finished(),
            "still discarding the client's input"
        );
        client.write_all(b"more").unwrap();
        drop(client);
        tokio::time::timeout(5 * LINGER, closing)
            .await
            .expect("done when the client closes")
            .unwrap();
    }

    #[tokio::test]
    async fn close_stops_reading_a_client_that_keeps_sending() {
        use std::io::Write;
        let (proxy, mut client) = pair().await;
        // Bounded in bytes and in time; ends when the proxy's end is gone.
        let sender = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let chunk = [b'x'; 16 << 10];
            for _ in 0..1 << 20 {
                if client.write_all(&chunk).is_err() || started.elapsed() > 3 * LINGER {
                    break;
                }
            }
        });
        let started = std::time::Instant::now();
        close(proxy).await;
        let took = started.elapsed();
        assert!(
            took < LINGER,
            "cut after LINGER_BYTES, not LINGER: {took:?}"
        );
        sender.join().unwrap();
    }

    #[tokio::test]
    async fn close_stops_at_exactly_linger_bytes() {
        use std::io::Write;
        let (proxy, mut client) = pair().await;
        let (done, closed) = std::sync::mpsc::channel::<()>();
        // Exactly the bound, then silence: a read past it would wait out LINGER.
        let sender = std::thread::spawn(move || {
            client.write_all(&[b'x'; LINGER_BYTES]).unwrap();
            let _ = closed.recv_timeout(5 * LINGER);
        });
        let started = std::time::Instant::now();
        close(proxy).await;
        let took = started.elapsed();
        drop(done);
        sender.join().unwrap();
        assert!(took < LINGER, "read past LINGER_BYTES: {took:?}");
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
