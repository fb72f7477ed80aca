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
use http::{Method, Request};

/// Why `request` cannot be forwarded as it is, if it cannot. One pass over
/// its few headers: two lookups by name cost more than reading them all.
pub(crate) fn why_unforwardable<B>(request: &Request<B>) -> Option<String> {
    if request.method() == Method::CONNECT {
        return Some(
            "CONNECT is not supported: the proxy forwards requests, it opens no tunnels".to_owned(),
        );
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
        } else if name == TRANSFER_ENCODING {
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
    }
    None
}

/// Whether `value` can be a `Host`: `host[:port]` (RFC 9110 §7.2), no user
/// info, no path, no white space. Checked byte by byte, as cheap as a look
/// (parsing an `Authority` cost the proxy about 2 % of a request).
fn is_host(value: &[u8]) -> bool {
    !value.is_empty()
        && value
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%:[]".contains(&b))
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
