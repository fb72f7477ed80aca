//! The headers that describe one connection, not the message (RFC 9110
//! §7.6.1), taken out of every message the proxy passes on, either way.

use http::header::{
    HeaderName, CONNECTION, CONTENT_LENGTH, HOST, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::HeaderMap;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1):
/// never forwarded in either direction. Names, not strings: a string would
/// be parsed into a name again on every request.
static HOP_BY_HOP: [HeaderName; 8] = [
    CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
];

/// Takes the hop-by-hop headers out of a message to be passed on, and its
/// `Content-Length` when it came with `Transfer-Encoding` (RFC 9112 §6.3:
/// the coding frames the body, which goes on by chunks; a length kept would
/// cut it short).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none: one look at their few names is cheaper than
    // eight removals, each a hash and a probe.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
    }
    // Headers named in Connection are hop-by-hop too; but for Host, which
    // every HTTP/1.1 request needs.
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| name != HOST)
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn hop_by_hop_headers_go_and_the_rest_stay() {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn a_message_framed_by_chunks_loses_its_content_length() {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and an
        // intermediary must remove it: the body is passed on by chunks (or
        // by its end), and a length kept would cut it short.
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("1"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        strip_hop_by_hop(&mut headers);
        assert!(headers.is_empty(), "{headers:?}");
        // Without Transfer-Encoding, the length is the message's own.
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("6"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.get("content-length").unwrap(), "6");
    }

    #[test]
    fn connection_cannot_name_host_away() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("Host, close"));
        headers.insert(HOST, HeaderValue::from_static("h"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.get(HOST).unwrap(), "h");
    }
}
