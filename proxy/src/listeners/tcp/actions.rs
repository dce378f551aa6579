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
}
