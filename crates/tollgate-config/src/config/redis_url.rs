//! The form of a Redis URL, checked without connecting, with a message
//! that names what is wrong (never showing the password): the Redis
//! client's own parse refuses some of these with words that point
//! elsewhere ("not a redis:// URL" for a `?` in a password), and accepts
//! others that do not do what was meant (`?db=2` is ignored: database 0;
//! `%ZZ` in a password is sent as is).

use crate::Error;

/// Checks the form of a Redis URL (`redis://[user:pass@]host[:port][/db]`,
/// `rediss://...` or `unix:///path`), without connecting.
///
/// # Errors
/// [`Error::InvalidRedisUrl`] saying what is wrong, showing the URL
/// without its password.
pub fn check_redis_url(url: &str) -> Result<String, Error> {
    let invalid = |reason: String| Error::InvalidRedisUrl {
        url: tollgate_redis::redact_url(url),
        reason,
    };
    let rest = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
        .ok_or_else(|| {
            invalid("expected redis://host[:port][/db], rediss://... or unix:///path".into())
        })?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("it contains spaces or control characters".into()));
    }
    if url.starts_with("redis") && !url.starts_with("redis+unix") {
        check_tcp(rest).map_err(invalid)?;
    } else if rest.is_empty() {
        return Err(invalid("the socket path is missing".into()));
    }
    Ok(url.to_owned())
}

/// What follows `redis://` or `rediss://`: `[user:pass@]host[:port]`, then
/// an optional `/db` and `?query`.
fn check_tcp(rest: &str) -> Result<(), String> {
    // The authority ends at the first '/', '?' or '#', as a URL parser
    // reads it: an '@' after that means one of them is in the password.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    if let Some(found) = after.chars().next().filter(|_| after.contains('@')) {
        return Err(format!(
            "the user name or password contains '{found}': percent-encode it as %{:02X}",
            u32::from(found)
        ));
    }
    let (user_info, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
    check_percent_escapes(user_info)?;
    let (host, port) = match host_port.rsplit_once(':') {
        // An IPv6 address in brackets, without a port.
        Some(_) if host_port.ends_with(']') => (host_port, None),
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return Err("the port must be a number from 0 to 65535".into());
    }
    check_query(after)
}

/// Every `%` in the user name or password starts an escape of two hex
/// digits: the Redis client would send an invalid one as it is.
fn check_percent_escapes(user_info: &str) -> Result<(), String> {
    let bytes = user_info.as_bytes();
    let valid = |at: usize| {
        bytes
            .get(at + 1..at + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    };
    match (0..bytes.len()).find(|&at| bytes[at] == b'%' && !valid(at)) {
        Some(_) => Err(
            "the user name or password has an invalid percent escape ('%' must be followed by \
             two hex digits; write a '%' itself as %25)"
                .into(),
        ),
        None => Ok(()),
    }
}

/// The path and query: a database given as `?db=` would be ignored (the
/// Redis client reads it from the path only), so it is refused.
fn check_query(after: &str) -> Result<(), String> {
    let query = after.split_once('?').map_or("", |(_, query)| query);
    let db = query.split('&').find_map(|pair| pair.strip_prefix("db="));
    match db {
        Some(db) => Err(format!(
            "the database goes in the path (redis://host:port/{db}), not in ?db="
        )),
        None => Ok(()),
    }
}
