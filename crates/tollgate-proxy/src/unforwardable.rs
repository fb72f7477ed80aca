//! Requests the proxy will not forward, refused before their decision.
//!
//! hyper parses what it serves leniently enough that a few requests reach
//! the proxy which it could only pass on changed or broken: a `CONNECT`
//! (the proxy opens no tunnels), a body coded by more than `chunked` (the
//! coding would be dropped with `Transfer-Encoding`, a hop-by-hop header,
//! and the upstream would read the coded bytes as the body), and a `Host`
//! given twice or that is not a host (RFC 9112 §3.2 requires a 400 for
//! both). Each is refused with a 400 saying why, through the key
//! extractors ([`crate::KeySource`]), so that like a request without a key
//! it uses no quota and never reaches the upstream.

use http::header::HOST;
use http::{Method, Request, Version};

/// Why `request` cannot be forwarded as it is, if it cannot: its transfer
/// coding by the check every front end shares
/// ([`tollgate_http::unsupported_transfer_coding`]), its `Host` lines in one
/// pass over its few headers.
pub(crate) fn why_unforwardable<B>(request: &Request<B>) -> Option<String> {
    if request.method() == Method::CONNECT {
        return Some(
            "CONNECT is not supported: the proxy forwards requests, it opens no tunnels".to_owned(),
        );
    }
    if let Some(why) = tollgate_http::unsupported_transfer_coding(request.headers()) {
        return Some(why);
    }
    let mut seen_host = false;
    for (name, value) in request.headers() {
        if name == HOST {
            if seen_host {
                return Some("the Host header is given more than once".to_owned());
            }
            seen_host = true;
            if !is_host(value.as_bytes()) {
                return Some(format!("the Host header {value:?} is not a host[:port]"));
            }
            // An absolute-form target (`GET http://a/`) or HTTP/2's
            // `:authority` names the host too: two names, two upstream
            // views of one request (RFC 9112 §3.2.2, RFC 9113 §8.3.1).
            if let Some(authority) = request.uri().authority() {
                if !authority
                    .as_str()
                    .as_bytes()
                    .eq_ignore_ascii_case(value.as_bytes())
                {
                    return Some(format!(
                        "the Host header {value:?} names another host than the request target's {:?}",
                        authority.as_str()
                    ));
                }
            }
        }
    }
    // HTTP/2 names the host in `:authority`, HTTP/1.0 may name none.
    if !seen_host && request.version() == Version::HTTP_11 {
        return Some("the Host header is missing: an HTTP/1.1 request must have one".to_owned());
    }
    // Without a `Host`, HTTP/2's `:authority` (or an absolute-form target)
    // becomes the upstream's `Host`: it must be one, as a `Host` must
    // (an audit: `a:abc` and `u:p@a:80`, user info and password included,
    // reached the upstream as `Host` over HTTP/2 only).
    if let Some(authority) = request.uri().authority().filter(|_| !seen_host) {
        if !is_host(authority.as_str().as_bytes()) {
            return Some(format!(
                "the request's authority {:?} is not a host[:port]",
                authority.as_str()
            ));
        }
    }
    None
}

/// Whether `value` can be a `Host`: `host[:port]` (RFC 9110 §7.2, RFC 3986
/// §3.2.2): an IP literal in brackets, or a name (no user info, no path, no
/// white space, `%` only as an escape), then at most one `:` and a port of
/// digits. Checked byte by byte, as cheap as a look (parsing an `Authority`
/// cost the proxy about 2 % of a request).
fn is_host(value: &[u8]) -> bool {
    let (host_ok, port) = match value.strip_prefix(b"[") {
        Some(literal) => match literal.iter().position(|&b| b == b']') {
            Some(end) => (
                end > 0
                    && literal[..end]
                        .iter()
                        .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.'),
                &literal[end + 1..],
            ),
            None => return false,
        },
        None => {
            let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
            (is_reg_name(&value[..end]), &value[end..])
        }
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    host_ok && port_ok
}

/// A host name or IPv4 address: unreserved and sub-delims characters, `%`
/// only before two hex digits.
fn is_reg_name(name: &[u8]) -> bool {
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => {
                let escape = name.get(i + 1..i + 3);
                if !escape.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) => i += 1,
            _ => return false,
        }
    }
    !name.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    /// An absolute-form request (`GET http://...`) with a `Host` line.
    fn absolute(target: &str, host: &str) -> Request<()> {
        let request = Request::builder().uri(target).header("host", host);
        request.body(()).unwrap()
    }

    #[test]
    fn what_the_proxy_forwards_and_what_it_refuses() {
        for fine in [
            request("GET", &[("host", "h")]),
            request(
                "POST",
                &[
                    ("host", "api.example:8080"),
                    ("transfer-encoding", "chunked"),
                ],
            ),
            request("GET", &[("host", "[::1]:80")]),
            request("GET", &[("host", "127.0.0.1:8080")]),
            request("GET", &[("host", "caf%C3%A9.example")]),
            request("GET", &[("host", "h:")]),
            absolute("http://H:8080/x", "h:8080"),
        ] {
            assert_eq!(why_unforwardable(&fine), None, "{fine:?}");
        }
        for version in [Version::HTTP_10, Version::HTTP_2] {
            let hostless = Request::builder().version(version).uri("/").body(());
            assert_eq!(why_unforwardable(&hostless.unwrap()), None, "{version:?}");
        }
        // HTTP/2: the host in `:authority` alone.
        let http2 = |uri: &str| {
            let request = Request::builder().version(Version::HTTP_2).uri(uri);
            why_unforwardable(&request.body(()).unwrap())
        };
        assert_eq!(http2("http://api.example:8080/x"), None);
        for bad in ["http://a:abc/x", "http://u@a/x", "http://u:p@a:80/x"] {
            let reason = http2(bad).unwrap_or_default();
            assert!(reason.contains("is not a host[:port]"), "{bad}: {reason}");
        }
        for (bad, why) in [
            (request("CONNECT", &[("host", "h:443")]), "CONNECT"),
            (request("GET", &[]), "Host header is missing"),
            (absolute("http://a/x", "b"), "names another host"),
            (
                request("GET", &[("host", "a"), ("host", "b")]),
                "more than once",
            ),
            (request("GET", &[("host", "a b")]), "not a host"),
            (request("GET", &[("host", "user@h")]), "not a host"),
            (request("GET", &[("host", "h:1:2")]), "not a host"),
            (request("GET", &[("host", "h:abc")]), "not a host"),
            (request("GET", &[("host", ":::")]), "not a host"),
            (request("GET", &[("host", "h%")]), "not a host"),
            (request("GET", &[("host", "[::1")]), "not a host"),
            (request("GET", &[("host", "[]:80")]), "not a host"),
            (
                request(
                    "POST",
                    &[("host", "h"), ("transfer-encoding", "chunked, chunked")],
                ),
                "chunked once",
            ),
            (
                request(
                    "POST",
                    &[
                        ("host", "h"),
                        ("transfer-encoding", "chunked"),
                        ("transfer-encoding", "chunked"),
                    ],
                ),
                "chunked once",
            ),
            (
                request(
                    "POST",
                    &[("host", "h"), ("transfer-encoding", "gzip, chunked")],
                ),
                "gzip",
            ),
        ] {
            let reason = why_unforwardable(&bad).unwrap_or_default();
            assert!(reason.contains(why), "{bad:?}: {reason}");
        }
    }
}
