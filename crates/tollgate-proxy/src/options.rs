//! The proxy's command-line values, parsed here so the binary stays thin:
//! windows (`"1s"`, `"15m"`), key sources (`peer`, `api-key`,
//! `header:X-Client-Id`), the one-limit plan built from `--policy`,
//! `--limit` and `--window`, and the connection limits.

use std::time::Duration;

use http::HeaderName;
use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_connections::Limits;

use crate::{Error, KeySource};

/// A window: a whole number with a unit `ms`, `s`, `m`, `h` or `d`, or a
/// bare number of milliseconds.
///
/// # Errors
/// [`Error::InvalidOption`] naming `--window`.
pub fn parse_window(text: &str) -> Result<u64, Error> {
    parse_duration_ms("--window", text)
}

/// A duration for the command-line option `option`, in the same format as
/// [`parse_window`], in milliseconds (at least 1).
///
/// # Errors
/// [`Error::InvalidOption`] naming `option`.
pub fn parse_duration_ms(option: &'static str, text: &str) -> Result<u64, Error> {
    match parse_any_duration_ms(option, text)? {
        0 => Err(Error::InvalidOption {
            option,
            reason: "must be at least 1 ms".into(),
        }),
        ms => Ok(ms),
    }
}

/// [`parse_duration_ms`] without its lower bound: zero included, for a
/// value whose own bounds are checked elsewhere (the connection limits:
/// `0ms` is then refused with those bounds, not with a bound of 1 ms that
/// is not the real one). The format is the core's, as in a config file.
fn parse_any_duration_ms(option: &'static str, text: &str) -> Result<u64, Error> {
    tollgate::parse_duration(text).map_err(|reason| Error::InvalidOption { option, reason })
}

/// The connection limits: `base` (a config file's `[connections]`, or the
/// defaults) with each flag given replacing its value, each checked
/// against its bounds (`tollgate_connections::Limits::new`'s, the only
/// ones: a flag's `0ms` is refused with them too).
///
/// # Errors
/// [`Error::InvalidOption`] naming the flag whose value is wrong or out of bounds.
pub fn connection_limits(
    base: Limits,
    header_read_timeout: Option<&str>,
    idle_timeout: Option<&str>,
    max_connections: Option<usize>,
) -> Result<Limits, Error> {
    let duration = |option: &'static str, text: Option<&str>, default: Duration| match text {
        None => Ok(default),
        Some(text) => parse_any_duration_ms(option, text).map(Duration::from_millis),
    };
    let limits = Limits {
        header_read_timeout: duration(
            "--header-read-timeout",
            header_read_timeout,
            base.header_read_timeout,
        )?,
        idle_timeout: duration("--idle-timeout", idle_timeout, base.idle_timeout)?,
        max_connections: max_connections.unwrap_or(base.max_connections),
    };
    Limits::new(
        limits.header_read_timeout,
        limits.idle_timeout,
        limits.max_connections,
    )
    .map_err(|error| {
        let tollgate_connections::Error::OutOfBounds { name, .. } = &error else {
            return Error::InvalidOption {
                option: "--max-connections",
                reason: error.to_string(),
            };
        };
        let option = match *name {
            "header_read_timeout" => "--header-read-timeout",
            "idle_timeout" => "--idle-timeout",
            _ => "--max-connections",
        };
        Error::InvalidOption {
            option,
            reason: error.to_string(),
        }
    })
}

/// A key source: `peer`, `api-key`, or `header:NAME`.
///
/// # Errors
/// [`Error::InvalidOption`] naming `--key`.
pub fn parse_key(text: &str, trusted_proxies: usize) -> Result<KeySource, Error> {
    let invalid = |reason: String| Error::InvalidOption {
        option: "--key",
        reason,
    };
    if trusted_proxies > 0 && text != "peer" {
        // It would change nothing: a flag given in vain is likely a mistake.
        return Err(Error::InvalidOption {
            option: "--trust-forwarded-for",
            reason: format!(
                "{trusted_proxies}: X-Forwarded-For is read only to key by the peer's \
                 address (--key peer), not with --key {text}"
            ),
        });
    }
    match text {
        "peer" => Ok(KeySource::Peer { trusted_proxies }),
        "api-key" => Ok(KeySource::ApiKey),
        _ => match text.strip_prefix("header:") {
            Some(name) => HeaderName::from_bytes(name.trim().as_bytes())
                .map(KeySource::Header)
                .map_err(|_| invalid(format!("{name:?} is not a valid header name"))),
            None => Err(invalid(format!(
                "{text:?}: expected peer, api-key or header:NAME"
            ))),
        },
    }
}

/// The plan `name` with one limit `name-<window>` of `policy`, `limit`
/// requests per `window_ms`.
///
/// # Errors
/// [`Error::Limit`] for an unknown policy or impossible numbers.
pub fn single_limit_plan(
    name: &str,
    policy: &str,
    limit: u32,
    window: &str,
) -> Result<Plan, Error> {
    let window_ms = parse_window(window)?;
    let policy = AnyPolicy::from_name(policy, limit, window_ms)?;
    Ok(Plan::new(
        name,
        vec![Limit::new(window.trim(), policy, false)],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_with_units() {
        assert_eq!(parse_window("250").unwrap(), 250);
        assert_eq!(parse_window("250ms").unwrap(), 250);
        assert_eq!(parse_window("1s").unwrap(), 1_000);
        assert_eq!(parse_window("15m").unwrap(), 900_000);
        assert_eq!(parse_window("1d").unwrap(), 86_400_000);
        for bad in ["", "s", "1w", "0s", "-1s", "1.5s", "99999999999999999999d"] {
            let err = parse_window(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid --window"), "{bad}: {err}");
        }
        // Digits past u64 are too large, as past u64 once scaled.
        for long in ["100000000000000000000d", "300000000000000d"] {
            let err = parse_window(long).unwrap_err().to_string();
            assert!(err.ends_with("is too large"), "{long}: {err}");
        }
    }

    #[test]
    fn connection_flags_replace_the_base_and_are_bounded() {
        let base = Limits::default();
        assert_eq!(connection_limits(base, None, None, None).unwrap(), base);
        let set = connection_limits(base, Some("300ms"), Some("2m"), Some(64)).unwrap();
        assert_eq!(set.header_read_timeout, Duration::from_millis(300));
        assert_eq!(set.idle_timeout, Duration::from_secs(120));
        assert_eq!(set.max_connections, 64);
        let cases = [
            (Some("50ms"), None, None, "invalid --header-read-timeout: header_read_timeout must be between 100ms and 10m (got 50ms)"),
            (None, Some("2d"), None, "invalid --idle-timeout: idle_timeout must be between 100ms and 1d (got 2d)"),
            (None, None, Some(0), "invalid --max-connections: max_connections must be between 1 and 1000000 (got 0)"),
            // Zero is out of the same bounds as any other value below them.
            (None, Some("0ms"), None, "invalid --idle-timeout: idle_timeout must be between 100ms and 1d (got 0ms)"),
            (Some("0"), None, None, "invalid --header-read-timeout: header_read_timeout must be between 100ms and 10m (got 0ms)"),
            (None, Some("soon"), None, "invalid --idle-timeout: invalid duration \"soon\": expected a whole number and a unit"),
        ];
        for (header, idle, max, expected) in cases {
            let error = connection_limits(base, header, idle, max)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{error}");
        }
    }

    #[test]
    fn keys_parse() {
        assert_eq!(
            parse_key("peer", 2).unwrap(),
            KeySource::Peer { trusted_proxies: 2 }
        );
        assert_eq!(parse_key("api-key", 0).unwrap(), KeySource::ApiKey);
        assert_eq!(
            parse_key("header:X-Client-Id", 0).unwrap(),
            KeySource::Header(HeaderName::from_static("x-client-id"))
        );
        assert!(parse_key("header:bad name", 0).is_err());
        assert!(parse_key("cookie", 0).is_err());
        let in_vain = parse_key("api-key", 2).unwrap_err().to_string();
        assert!(
            in_vain.starts_with("invalid --trust-forwarded-for: 2: X-Forwarded-For is read only"),
            "{in_vain}"
        );
    }

    #[test]
    fn plans_are_checked() {
        let plan = single_limit_plan("proxy", "token-bucket", 10, "1s").unwrap();
        assert_eq!(plan.limits()[0].name(), "1s");
        let err = single_limit_plan("proxy", "leaky", 10, "1s").unwrap_err();
        assert!(err.to_string().contains("unknown policy"), "{err}");
        assert!(single_limit_plan("proxy", "gcra", 0, "1s").is_err());
    }
}
