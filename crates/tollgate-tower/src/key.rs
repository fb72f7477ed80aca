//! Who is calling: the client key a request is counted under.
//!
//! A [`KeyExtractor`] reads it from the request: [`PeerIp`] (the TCP peer,
//! or `X-Forwarded-For` when behind trusted proxies), [`HeaderKey`] (any
//! header), [`ApiKey`] (`Authorization: Bearer` or `X-API-Key`), or any
//! closure `Fn(&Request<B>) -> Option<String>`. `None` means "no key": the
//! layer then applies its [`crate::MissingKey`] policy.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use http::{HeaderName, Request};

/// Finds the client key of a request.
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key the request is counted under, or `None` when the request does
    /// not carry one.
    fn extract(&self, request: &Request<B>) -> Option<String>;

    /// Why `request` has no key: asked only for a request
    /// [`KeyExtractor::extract`] found none in. The default: it carries
    /// none, and the 400 says only that it does not say who is calling.
    fn why_missing(&self, _request: &Request<B>) -> NoKey {
        NoKey::Absent(None)
    }
}

/// Why a request has no client key ([`KeyExtractor::why_missing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoKey {
    /// The request carries none: the layer's [`crate::MissingKey`] policy
    /// decides. The text, if any, says what was looked for, for the 400.
    Absent(Option<String>),
    /// It carries one that cannot be used (a header given twice, not
    /// UTF-8): refused with this text (400) whatever the
    /// [`crate::MissingKey`] policy, since letting it through would let a
    /// client skip its limit by sending its key twice.
    Unusable(String),
}

impl NoKey {
    fn of(error: tollgate_http::KeyError) -> Self {
        if error.is_absent() {
            NoKey::Absent(Some(error.to_string()))
        } else {
            NoKey::Unusable(error.to_string())
        }
    }
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<String> + Clone + Send + Sync + 'static,
{
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self(request)
    }
}

/// The client's IP address.
///
/// The peer address comes from the request extensions: axum's
/// `ConnectInfo<SocketAddr>` (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`) or a plain
/// `SocketAddr` inserted by a hyper server loop.
///
/// `X-Forwarded-For` is read only when configured with
/// [`PeerIp::behind_proxies`]: anyone can send that header, so trusting it
/// without a proxy in front lets every client pick its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerIp {
    trusted_proxies: usize,
}

impl PeerIp {
    /// The TCP peer's address; `X-Forwarded-For` is ignored.
    pub fn direct() -> Self {
        Self { trusted_proxies: 0 }
    }

    /// Behind `proxies` trusted reverse proxies, each appending the address
    /// it saw to `X-Forwarded-For`: the client is the `proxies`-th address
    /// from the right (entries further left were written by the client and
    /// may be forged). With fewer entries than that, the leftmost one. With
    /// no usable header, the TCP peer. `behind_proxies(0)` is [`PeerIp::direct`].
    pub fn behind_proxies(proxies: usize) -> Self {
        Self {
            trusted_proxies: proxies,
        }
    }

    fn forwarded_for<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        if self.trusted_proxies == 0 {
            return None;
        }
        // Several header lines form one comma-separated list, in order.
        // Split as bytes: an odd byte the client wrote in its own entries
        // must not take the trusted proxies' entries with it.
        let entries: Vec<&[u8]> = request
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|s| !s.is_empty())
            .collect();
        let index = entries.len().saturating_sub(self.trusted_proxies);
        let entry = std::str::from_utf8(entries.get(index)?).ok()?;
        parse_ip(entry)
    }
}

/// An address as proxies write it: a bare IP, or `ip:port` / `[v6]:port`.
fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The peer address a server put into the request extensions.
pub fn peer_addr<B>(request: &Request<B>) -> Option<SocketAddr> {
    let extensions = request.extensions();
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| extensions.get::<SocketAddr>().copied())
}

impl PeerIp {
    /// The key of `request` from a connection whose peer is `peer`: for a
    /// server that knows the peer per connection and so need not put it
    /// into every request's extensions (where [`KeyExtractor::extract`]
    /// reads it). `X-Forwarded-For` is read as configured.
    pub fn key_for_peer<B>(
        &self,
        request: &Request<B>,
        peer: Option<SocketAddr>,
    ) -> Option<String> {
        let ip = self.forwarded_for(request).or(peer.map(|a| a.ip()))?;
        // An IPv4 client reached over an IPv6 socket counts as itself.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        Some(ip_key(ip))
    }
}

impl<B> KeyExtractor<B> for PeerIp {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self.key_for_peer(request, peer_addr(request))
    }
}

/// `ip` in its usual text form (`Display`'s). An IPv4 address, the common
/// case, is written octet by octet: through `Display` it costs about ten
/// times as many instructions, 3 % of a proxied request (BENCHMARKS.md).
fn ip_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut key = String::with_capacity("255.255.255.255".len());
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    key.push('.');
                }
                key.push_str(digits.format(octet));
            }
            key
        }
        IpAddr::V6(v6) => v6.to_string(),
    }
}

/// The value of one header (e.g. `X-Client-Id`), trimmed; absent, empty,
/// repeated or non-UTF-8 values are no key (read by
/// [`tollgate_http::header_key`], whose error the 400 says). `Host` is read
/// from the request's authority when the header is absent: an HTTP/2
/// client names the host in `:authority` only (an audit: `header:host`
/// refused every HTTP/2 request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys requests by the header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        let headers = request.headers();
        match tollgate_http::header_key(headers, &self.name) {
            Ok(key) => Some(key),
            Err(_) if self.name == http::header::HOST && !headers.contains_key(&self.name) => {
                Some(request.uri().authority()?.as_str().to_owned())
            }
            Err(_) => None,
        }
    }

    fn why_missing(&self, request: &Request<B>) -> NoKey {
        match tollgate_http::header_key(request.headers(), &self.name) {
            Ok(_) => NoKey::Absent(None),
            Err(error) => NoKey::of(error),
        }
    }
}

/// The caller's API key: the token of `Authorization: Bearer TOKEN`, or else
/// the `X-API-Key` header (read by [`tollgate_http::api_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApiKey;

impl<B> KeyExtractor<B> for ApiKey {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        tollgate_http::api_key(request.headers()).ok()
    }

    fn why_missing(&self, request: &Request<B>) -> NoKey {
        match tollgate_http::api_key(request.headers()) {
            Ok(_) => NoKey::Absent(None),
            Err(error) => NoKey::of(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)], peer: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().uri("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut request = builder.body(()).unwrap();
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        }
        request
    }

    #[test]
    fn peer_ip_ignores_forwarded_for_unless_trusted() {
        let r = request(&[("x-forwarded-for", "9.9.9.9")], Some("10.0.0.1:5555"));
        assert_eq!(PeerIp::direct().extract(&r).as_deref(), Some("10.0.0.1"));
        assert_eq!(
            PeerIp::behind_proxies(1).extract(&r).as_deref(),
            Some("9.9.9.9")
        );
    }

    #[test]
    fn a_peer_given_by_the_connection_stands_for_the_requests_own() {
        let peer = "10.0.0.2:7".parse().ok();
        let plain = request(&[], None);
        assert_eq!(
            PeerIp::direct().key_for_peer(&plain, peer).as_deref(),
            Some("10.0.0.2")
        );
        assert_eq!(PeerIp::direct().key_for_peer(&plain, None), None);
        // X-Forwarded-For is still read only when trusted.
        let forwarded = request(&[("x-forwarded-for", "9.9.9.9")], None);
        let key = |n| PeerIp::behind_proxies(n).key_for_peer(&forwarded, peer);
        assert_eq!(key(0).as_deref(), Some("10.0.0.2"));
        assert_eq!(key(1).as_deref(), Some("9.9.9.9"));
    }

    #[test]
    fn forwarded_for_counts_trusted_hops_from_the_right() {
        let r = request(
            &[
                ("x-forwarded-for", "6.6.6.6, 1.1.1.1"),
                ("x-forwarded-for", "2.2.2.2"),
            ],
            Some("10.0.0.1:1"),
        );
        let key = |n| PeerIp::behind_proxies(n).extract(&r);
        assert_eq!(key(1).as_deref(), Some("2.2.2.2"));
        assert_eq!(key(2).as_deref(), Some("1.1.1.1"));
        assert_eq!(key(9).as_deref(), Some("6.6.6.6"));
    }

    /// A byte outside visible ASCII in an entry the client wrote (left of
    /// the trusted ones) must not throw the trusted entries away with it,
    /// which would key the request by the proxy in front.
    #[test]
    fn an_odd_byte_in_the_clients_own_entries_leaves_the_trusted_ones() {
        let mut r = request(&[], Some("10.0.0.1:1"));
        let odd = http::HeaderValue::from_bytes(b"caf\xc3\xa9, \x80, 9.9.9.9").unwrap();
        r.headers_mut().append("x-forwarded-for", odd);
        let key = |n| PeerIp::behind_proxies(n).extract(&r);
        assert_eq!(key(1).as_deref(), Some("9.9.9.9"));
        // The trusted entry is itself unreadable: the peer, as for garbage.
        assert_eq!(key(2).as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn garbage_forwarded_for_falls_back_to_peer() {
        let r = request(&[("x-forwarded-for", "not-an-ip")], Some("[::1]:80"));
        assert_eq!(
            PeerIp::behind_proxies(1).extract(&r).as_deref(),
            Some("::1")
        );
    }

    #[test]
    fn mapped_v4_is_v4_and_missing_peer_is_no_key() {
        let r = request(&[], Some("[::ffff:1.2.3.4]:80"));
        assert_eq!(PeerIp::direct().extract(&r).as_deref(), Some("1.2.3.4"));
        assert_eq!(PeerIp::direct().extract(&request(&[], None)), None);
    }

    #[test]
    fn ip_keys_are_the_addresses_as_displayed() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.0.12.255",
            "100.99.9.0",
            "255.255.255.255",
            "::1",
            "2001:db8::8:800:200c:417a",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_key(ip), ip.to_string());
        }
    }

    /// An HTTP/2 request names its host in `:authority` alone: the `Host`
    /// key reads it there; a `Host` header, when sent, is the key.
    #[test]
    fn the_host_key_of_an_http2_request_is_its_authority() {
        let key = HeaderKey::new(http::header::HOST);
        let http2 = Request::builder()
            .version(http::Version::HTTP_2)
            .uri("http://api.example:8080/x")
            .body(())
            .unwrap();
        assert_eq!(key.extract(&http2).as_deref(), Some("api.example:8080"));
        assert_eq!(
            key.extract(&request(&[("host", "h")], None)).as_deref(),
            Some("h")
        );
        assert_eq!(key.extract(&request(&[], None)), None);
    }

    #[test]
    fn header_key_trims_and_rejects_empty() {
        let key = HeaderKey::new(HeaderName::from_static("x-client-id"));
        assert_eq!(
            key.extract(&request(&[("x-client-id", " alice ")], None))
                .as_deref(),
            Some("alice")
        );
        assert_eq!(key.extract(&request(&[("x-client-id", "  ")], None)), None);
        assert_eq!(key.extract(&request(&[], None)), None);
        // UTF-8 is a key, as in the server's forward-auth; other bytes are not.
        let mut utf8 = request(&[], None);
        let zoe = http::HeaderValue::from_bytes("zoë".as_bytes()).unwrap();
        utf8.headers_mut().insert("x-client-id", zoe);
        assert_eq!(key.extract(&utf8).as_deref(), Some("zoë"));
        let mut bad = request(&[], None);
        let invalid = http::HeaderValue::from_bytes(b"\xff").unwrap();
        bad.headers_mut().insert("x-client-id", invalid);
        assert_eq!(key.extract(&bad), None);
    }

    #[test]
    fn api_key_prefers_bearer_then_x_api_key() {
        let both = request(
            &[("authorization", "Bearer tok"), ("x-api-key", "tok")],
            None,
        );
        assert_eq!(ApiKey.extract(&both).as_deref(), Some("tok"));
        // Two different keys name no client: refused, whatever lets keyless
        // requests through.
        let two = request(&[("authorization", "Bearer tok"), ("x-api-key", "k")], None);
        assert_eq!(ApiKey.extract(&two), None);
        assert!(
            matches!(ApiKey.why_missing(&two), NoKey::Unusable(why) if why.contains("two API keys"))
        );
        let basic = request(&[("authorization", "Basic abc"), ("x-api-key", "k")], None);
        assert_eq!(ApiKey.extract(&basic).as_deref(), Some("k"));
        assert_eq!(ApiKey.extract(&request(&[], None)), None);
    }

    #[test]
    fn closures_are_extractors() {
        let by_path = |r: &Request<()>| Some(r.uri().path().to_owned());
        assert_eq!(by_path.extract(&request(&[], None)).as_deref(), Some("/"));
    }
}
