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

use http::header::{HOST, TRANSFER_ENCODING};
use http::uri::Authority;
use http::{Method, Request};

/// Why `request` cannot be forwarded as it is, if it cannot.
pub(crate) fn why_unforwardable<B>(request: &Request<B>) -> Option<String> {
    if request.method() == Method::CONNECT {
        return Some(
            "CONNECT is not supported: the proxy forwards requests, it opens no tunnels".to_owned(),
        );
    }
    let mut hosts = request.headers().get_all(HOST).iter();
    if let Some(host) = hosts.next() {
        if hosts.next().is_some() {
            return Some("the Host header is given more than once".to_owned());
        }
        let is_host = host
            .to_str()
            .ok()
            .filter(|text| !text.contains('@'))
            .is_some_and(|text| text.parse::<Authority>().is_ok());
        if !is_host {
            return Some(format!("the Host header {host:?} is not a host[:port]"));
        }
    }
    for value in request.headers().get_all(TRANSFER_ENCODING) {
        let codings = value.to_str().unwrap_or("?");
        if codings
            .split(',')
            .any(|c| !c.trim().eq_ignore_ascii_case("chunked"))
        {
            return Some(format!(
                "Transfer-Encoding {codings:?} is not supported: the proxy passes bodies on chunked or by length only"
            ));
        }
    }
    None
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
            request("GET", &[]),
        ] {
            assert_eq!(why_unforwardable(&fine), None, "{fine:?}");
        }
        for (bad, why) in [
            (request("CONNECT", &[("host", "h:443")]), "CONNECT"),
            (
                request("GET", &[("host", "a"), ("host", "b")]),
                "more than once",
            ),
            (request("GET", &[("host", "a b")]), "not a host"),
            (request("GET", &[("host", "user@h")]), "not a host"),
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
