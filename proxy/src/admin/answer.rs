//! How the admin answers: plain text for people, JSON for programs (asked for with
//! `?format=json` or `Accept: application/json`; `?format=text` forces text), and refusals
//! that say what was wrong in the same form.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};

/// An admin answer.
pub(crate) type Answer = Response<Full<Bytes>>;

/// The form an answer is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Aligned columns and sentences.
    Text,
    /// One JSON document.
    Json,
}

impl Format {
    /// What `request` asks for: `?format=json|text` first, then the `Accept` header; text if
    /// neither says.
    pub(crate) fn of<B>(request: &Request<B>) -> Format {
        match query(request, "format").as_deref() {
            Some("json") => return Format::Json,
            Some("text") => return Format::Text,
            _ => {}
        }
        let accepts_json = request
            .headers()
            .get_all(ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|value| value.contains("application/json"));
        if accepts_json {
            Format::Json
        } else {
            Format::Text
        }
    }

    /// A refusal with `status` saying `message` (a sentence; in JSON, `{"error": message}`).
    pub(crate) fn refuse(self, status: StatusCode, message: &str) -> Answer {
        match self {
            Format::Text => text(status, format!("{message}\n")),
            Format::Json => json(status, &serde_json::json!({ "error": message })),
        }
    }
}

/// A plain-text answer.
pub(crate) fn text(status: StatusCode, body: String) -> Answer {
    answer(status, body, "text/plain; charset=utf-8")
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Answer {
    let mut body = value.to_string();
    body.push('\n');
    answer(status, body, "application/json")
}

fn answer(status: StatusCode, body: String, kind: &'static str) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

/// The value of query parameter `name`, percent-decoded; `None` if absent or not UTF-8
/// once decoded.
pub(crate) fn query<B>(request: &Request<B>, name: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if key != name {
            return None;
        }
        decode(value)
    })
}

/// Every raw value of query parameter `name`, in order, its escapes not yet decoded (for a
/// value whose parts are split before decoding, as `/explain`'s descriptors are).
pub(crate) fn query_raw_all<'r, B>(request: &'r Request<B>, name: &str) -> Vec<&'r str> {
    let Some(query) = request.uri().query() else {
        return Vec::new();
    };
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .collect()
}

/// `%XX` escapes decoded; `None` for a bad escape or bytes that are not UTF-8.
pub(crate) fn decode(value: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(value.len());
    let mut rest = value.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_decoded_and_bad_ones_refused() {
        assert_eq!(decode("10.0.0.0%2F8").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(decode("2001%3adb8%3A%3A1").as_deref(), Some("2001:db8::1"));
        assert_eq!(decode("plain").as_deref(), Some("plain"));
        assert_eq!(decode("%2"), None);
        assert_eq!(decode("%zz"), None);
        assert_eq!(decode("%ff"), None);
    }
}
