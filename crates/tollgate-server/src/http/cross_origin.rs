//! Cross-origin protection for `POST /v1/check`, as Go 1.25's
//! `net/http.CrossOriginProtection` does it.
//!
//! A page of any origin can make its visitors' browsers send
//! `fetch(".../v1/check", {method: "POST", mode: "no-cors", body})` with a
//! `text/plain` body: a "simple" request, sent without a CORS preflight,
//! whose answer the page never sees but whose decision spends the quota of
//! whichever client the body names. Browsers say where such a request comes
//! from, and the check refuses it on their word:
//!
//! - `Sec-Fetch-Site` (every current browser) other than `same-origin` or
//!   `none` (a request the user made, e.g. typed) is refused;
//! - without it, an `Origin` (older browsers) whose `host[:port]` is not the
//!   request's `Host` is refused;
//! - a request with neither, what every client that is not a browser sends
//!   (curl, gateways, SDKs), is decided as it always was.
//!
//! Requiring a JSON `Content-Type` instead would break those clients (curl's
//! `-d` sends form-urlencoded). `GET /v1/auth` is not checked: nginx
//! `auth_request` and Traefik forward the user's own browser headers,
//! `Origin` included, on legitimate cross-origin traffic to the API they
//! guard, and a forward-auth check is the gateway's, not a page's.

use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};

use super::Rejection;

/// `Sec-Fetch-Site`, which `http` has no constant for.
const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// The most characters of a header value quoted back in a refusal.
const QUOTED_CHARS: usize = 100;

/// Refuses, with a 403, a request a browser sent from a page of another
/// origin; passes every other (see the module documentation for the rule).
/// `uri` and `headers` are the request's: the host it was sent to is the
/// URI's authority (HTTP/2, or an absolute URI) or else its `Host`.
///
/// # Errors
/// A 403 [`Rejection`] naming the header that gave the request away.
pub fn no_cross_origin(uri: &Uri, headers: &HeaderMap) -> Result<(), Rejection> {
    if let Some(site) = headers.get(SEC_FETCH_SITE).filter(|v| !v.is_empty()) {
        return match site.as_bytes() {
            b"same-origin" | b"none" => Ok(()),
            _ => Err(refused(format!(
                "Sec-Fetch-Site is {}, not same-origin",
                quoted(site)
            ))),
        };
    }
    let Some(origin) = headers.get(ORIGIN).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let host = uri
        .authority()
        .map(|authority| authority.as_str().as_bytes())
        .or_else(|| headers.get(HOST).map(HeaderValue::as_bytes))
        .unwrap_or_default();
    match origin_host(origin.as_bytes()) {
        Some(origin_host) if origin_host.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(refused(format!(
            "Origin {} is not this server's host {:?}",
            quoted(origin),
            String::from_utf8_lossy(host)
        ))),
    }
}

/// The `host[:port]` of a serialized origin (`scheme://host[:port]`, no
/// path); `None` for an opaque origin (`null`) or anything else.
fn origin_host(origin: &[u8]) -> Option<&[u8]> {
    let separator = origin.windows(3).position(|w| w == b"://")?;
    let host = &origin[separator + 3..];
    let plain = separator > 0
        && !host.is_empty()
        && !host.iter().any(|b| matches!(b, b'/' | b'?' | b'#' | b'@'));
    plain.then_some(host)
}

/// The refusal, saying what was refused and why.
fn refused(because: String) -> Rejection {
    Rejection::new(
        StatusCode::FORBIDDEN,
        format!(
            "cross-origin request refused: {because}. POST /v1/check does not take requests a \
             browser sends from a page of another origin, which could spend any client's quota \
             through its visitors; clients that are not browsers send neither Sec-Fetch-Site \
             nor Origin"
        ),
    )
}

/// A header value in quotes for a refusal, cut to [`QUOTED_CHARS`].
fn quoted(value: &HeaderValue) -> String {
    let text = String::from_utf8_lossy(value.as_bytes());
    let cut: String = text.chars().take(QUOTED_CHARS).collect();
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(uri: &str, headers: &[(&str, &str)]) -> Result<(), StatusCode> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        no_cross_origin(&uri.parse().unwrap(), &map).map_err(|r| r.status)
    }

    const REFUSED: Result<(), StatusCode> = Err(StatusCode::FORBIDDEN);

    #[test]
    fn sec_fetch_site_decides_when_present() {
        let host = ("host", "127.0.0.1:8080");
        for site in ["same-origin", "none"] {
            assert_eq!(
                check("/v1/check", &[host, ("sec-fetch-site", site)]),
                Ok(())
            );
        }
        for site in ["same-site", "cross-site", "Same-Origin", "other"] {
            assert_eq!(
                check("/v1/check", &[host, ("sec-fetch-site", site)]),
                REFUSED,
                "{site}"
            );
        }
        // Even with an Origin that matches the host.
        let origin = ("origin", "http://127.0.0.1:8080");
        assert_eq!(
            check(
                "/v1/check",
                &[host, origin, ("sec-fetch-site", "cross-site")]
            ),
            REFUSED
        );
    }

    #[test]
    fn without_sec_fetch_site_the_origin_must_name_the_host() {
        let host = ("host", "api.example:8080");
        for same in ["http://api.example:8080", "https://API.example:8080"] {
            assert_eq!(check("/", &[host, ("origin", same)]), Ok(()), "{same}");
        }
        for other in [
            "http://api.example",
            "http://evil.example:8080",
            "null",
            "api.example:8080",
            "://api.example:8080",
            "http://api.example:8080/",
            "http://user@api.example:8080",
        ] {
            assert_eq!(check("/", &[host, ("origin", other)]), REFUSED, "{other}");
        }
        // No host to compare with: refused.
        assert_eq!(check("/", &[("origin", "http://a")]), REFUSED);
    }

    #[test]
    fn the_uri_authority_is_the_host_when_there_is_one() {
        let origin = ("origin", "http://api.example");
        assert_eq!(check("http://api.example/v1/check", &[origin]), Ok(()));
        assert_eq!(
            check(
                "http://other.example/v1/check",
                &[("host", "api.example"), origin]
            ),
            REFUSED
        );
    }

    #[test]
    fn clients_that_are_not_browsers_pass() {
        assert_eq!(check("/v1/check", &[]), Ok(()));
        assert_eq!(check("/v1/check", &[("host", "127.0.0.1:8080")]), Ok(()));
        // Empty values are absent values, as Go reads them.
        assert_eq!(
            check("/v1/check", &[("sec-fetch-site", ""), ("origin", "")]),
            Ok(())
        );
    }
}
