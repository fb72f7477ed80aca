//! Where allowed requests go: the upstream's URL, checked once at start-up.

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Uri};

use crate::Error;

/// Where allowed requests go: an `http://host:port[/base]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port` (port 80 when the URL has none), to connect to.
    pub(crate) address: String,
    /// The `Host` of a request that came without one and without an
    /// authority in its URI: the upstream's, as an HTTP client sends it.
    pub(crate) host: HeaderValue,
    /// Prefixed to every request path; empty or starting with `/`, never ending with one.
    base_path: String,
    url: String,
}

impl Upstream {
    /// Parses an upstream URL such as `http://127.0.0.1:3000` or
    /// `http://api.internal:8080/v2` (requests for `/x` then go to `/v2/x`).
    ///
    /// # Errors
    /// [`Error::InvalidUpstream`] when the URL does not parse, is not
    /// `http://` (TLS to the upstream is not supported), has no host, has
    /// user info (`user:password@`: the proxy sends no credentials to the
    /// upstream, so they would be dropped silently), or has a query. The
    /// error shows the URL with its user info as `***`, so that a password
    /// never reaches a log.
    pub fn parse(url: &str) -> Result<Self, Error> {
        let (shown, has_user_info) = redact_user_info(url);
        let invalid = |reason: &str| Error::InvalidUpstream {
            url: shown.clone(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => {}
            Some(_) => return Err(invalid("only http:// upstreams are supported")),
            None => return Err(invalid("expected a URL such as http://127.0.0.1:3000")),
        }
        if has_user_info {
            return Err(invalid(
                "user info (user:password@) is not supported: \
                 the proxy sends no credentials to the upstream; give http://HOST:PORT",
            ));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("the URL has no host"))?;
        if uri.query().is_some() {
            return Err(invalid("the URL must not have a query"));
        }
        // `Authority::port` is `None` for a port that is not a `u16` too
        // (`:99999`), which would then be taken for port 80.
        let port = authority.as_str().rsplit_once(':').map(|(_, port)| port);
        if port.is_some_and(|port| !port.contains(']') && !port.parse().is_ok_and(|p: u16| p > 0)) {
            return Err(invalid("the port must be from 1 to 65535"));
        }
        Ok(Self {
            address: format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            host: host_header(authority).map_err(|e| invalid(&e.to_string()))?,
            base_path: uri.path().trim_end_matches('/').to_owned(),
            url: url.to_owned(),
        })
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The path and query to ask the upstream for (origin form) for a
    /// request to `path_and_query`: the same, behind the base path if any.
    /// `OPTIONS *` (the asterisk form, about the server as a whole, not a
    /// path) stays `*` (an audit: `/v2*` before, another resource).
    pub(crate) fn path_for(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<PathAndQuery, http::Error> {
        match path_and_query {
            Some(tail) if self.base_path.is_empty() || tail.as_str() == "*" => Ok(tail.clone()),
            tail => {
                let tail = tail.map_or("/", PathAndQuery::as_str);
                Ok(PathAndQuery::try_from(format!("{}{tail}", self.base_path))?)
            }
        }
    }
}

/// `url` with the user info of its authority (what comes before an `@`
/// ahead of the path) replaced by `***`, and whether it had any: read from
/// the text, so that even a URL that does not parse is shown without it.
fn redact_user_info(url: &str) -> (String, bool) {
    let start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => (format!("{}***{}", &url[..start], &url[start + at..]), true),
        None => (url.to_owned(), false),
    }
}

/// The `Host` header for `authority`: its host, and its port unless 80
/// (what an HTTP client sends).
fn host_header(authority: &Authority) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    match authority.port_u16() {
        Some(80) => HeaderValue::from_str(authority.host()),
        _ => HeaderValue::from_str(authority.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked() {
        let up = Upstream::parse("http://127.0.0.1:3000/").unwrap();
        let pq: PathAndQuery = "/a?b=c".parse().unwrap();
        assert_eq!(up.path_for(Some(&pq)).unwrap(), "/a?b=c");
        assert_eq!(up.path_for(None).unwrap(), "/");
        assert_eq!(up.address, "127.0.0.1:3000");
        assert_eq!(up.host, "127.0.0.1:3000");
        let based = Upstream::parse("http://h/v2/").unwrap();
        assert_eq!(based.path_for(Some(&pq)).unwrap(), "/v2/a?b=c");
        assert_eq!(based.path_for(None).unwrap(), "/v2/");
        let asterisk = PathAndQuery::from_static("*");
        assert_eq!(based.path_for(Some(&asterisk)).unwrap(), "*");
        assert_eq!(based.address, "h:80");
        assert_eq!(based.host, "h");
        for (bad, why) in [
            ("https://h", "only http://"),
            ("127.0.0.1:3000", "expected a URL"),
            ("http://h/?q=1", "query"),
            ("http://", "invalid upstream"),
        ] {
            let err = Upstream::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn user_info_is_refused_without_showing_the_password() {
        // The proxy sends no credentials to the upstream: a user or password
        // in the URL would be silently dropped, so it is refused.
        for url in [
            "http://u:s3cret@127.0.0.1:1",
            "http://u:s3cret@h/v2",
            "http://token-s3cret@h",
            "http://u:s3cret@h/?q=1",
            "http://u:s3cret@",
        ] {
            let err = Upstream::parse(url).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid upstream \"http://"),
                "{url}: {err}"
            );
            assert!(!err.contains("s3cret"), "{url}: {err}");
            assert!(err.contains("***@"), "{url}: {err}");
        }
        let err = Upstream::parse("http://u:s3cret@127.0.0.1:1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid upstream \"http://***@127.0.0.1:1\": user info (user:password@) is not supported: \
             the proxy sends no credentials to the upstream; give http://HOST:PORT"
        );
    }

    #[test]
    fn a_port_out_of_range_is_refused() {
        for url in ["http://127.0.0.1:99999", "http://h:65536/v2", "http://h:0"] {
            let err = Upstream::parse(url).unwrap_err().to_string();
            assert!(err.contains("port"), "{url}: {err}");
        }
        assert!(Upstream::parse("http://h:65535").is_ok());
        assert_eq!(
            Upstream::parse("http://[::1]:8080").unwrap().address,
            "[::1]:8080"
        );
        assert_eq!(Upstream::parse("http://[::1]").unwrap().address, "[::1]:80");
    }
}
