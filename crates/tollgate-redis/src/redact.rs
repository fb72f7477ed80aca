//! Redis URLs shown without their passwords: the one place that masks
//! them, for logs ([`crate::RedisTarget::redacted`]), errors (a URL that
//! is refused, a config line that holds one) and `/v1/config`.
//!
//! It reads the text, not a parsed URL, so that a URL that does not parse
//! (the ones errors quote) is masked as well as one that does, and it
//! masks more than the password rather than less where the text is
//! ambiguous: a user who typed a raw `@`, `/`, `?` or `#` in a password
//! meant it as one.

use std::ops::Range;

/// What stands for a password.
const MASK: &str = "***";

/// `url` with its passwords replaced by `***`: the password of the user
/// info (`redis://alice:***@host:6379`; the user stays) and the value of
/// every `pass=` or `password=` query parameter (`unix:///r.sock?pass=***`:
/// redis-rs reads `pass`; `password` is masked too, in case someone wrote
/// it). The user info runs from after `://` (the start, without one) to
/// the last `@`, its password from its first `:`; a parameter's value to
/// the next `&`. Any input is accepted, a URL without a password is
/// returned as given.
pub fn redact_url(url: &str) -> String {
    let mut spans: Vec<Range<usize>> = user_info_password(url).into_iter().collect();
    spans.extend(query_passwords(url));
    mask(url, spans)
}

/// `text` (a config line, an error message) with the passwords of the URLs
/// in it replaced by `***`: [`redact_url`] of each quoted string (`"..."`,
/// with its escapes, or `'...'`, up to the line's end at most), so that a
/// URL with a space in its password is masked whole, and of each word
/// outside them, so that two URLs in one sentence are masked apart.
pub fn redact_urls_in(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut piece_start = 0;
    let mut quote = None;
    let mut escaped = false;
    let mut after_separator = true;
    for (i, c) in text.char_indices() {
        let ends_piece = match quote {
            Some(q) => c == '\n' || (c == q && !escaped),
            None => c.is_whitespace() || (after_separator && is_quote(c)),
        };
        if ends_piece {
            shown.push_str(&redact_url(&text[piece_start..i]));
            shown.push(c);
            piece_start = i + c.len_utf8();
            quote = if quote.is_none() && is_quote(c) {
                Some(c)
            } else {
                None
            };
        }
        escaped = quote == Some('"') && c == '\\' && !escaped;
        // A quote opens a string only where a value starts, not in `can't`,
        // or right after a string closed: TOML's `'''` and `"""` open one.
        after_separator = c.is_whitespace()
            || "=[,(".contains(c)
            || (ends_piece && quote.is_none() && is_quote(c));
    }
    shown.push_str(&redact_url(&text[piece_start..]));
    shown
}

fn is_quote(c: char) -> bool {
    c == '"' || c == '\''
}

/// The password of the user info: from the first `:` after the scheme's
/// `://` to the last `@`.
fn user_info_password(url: &str) -> Option<Range<usize>> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let at = start + url[start..].rfind('@')?;
    let colon = start + url[start..at].find(':')?;
    Some(colon + 1..at)
}

/// The value of every `pass=` or `password=` parameter: after a `?` or
/// `&`, to the next `&`.
fn query_passwords(url: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    url.match_indices(['?', '&']).filter_map(|(i, _)| {
        let param = &url[i + 1..];
        let key_end = param.find(['=', '&', '?'])?;
        if !param[key_end..].starts_with('=') || !is_password_key(&param[..key_end]) {
            return None;
        }
        let value = &param[key_end + 1..];
        let start = i + 1 + key_end + 1;
        Some(start..start + value.find('&').unwrap_or(value.len()))
    })
}

/// Whether a query key, percent-decoded as redis-rs decodes it, names a
/// password (in any case).
fn is_password_key(key: &str) -> bool {
    let decoded = percent_decode(key.as_bytes());
    decoded.eq_ignore_ascii_case(b"pass") || decoded.eq_ignore_ascii_case(b"password")
}

/// `%XX` decoded; anything else (a lone `%`, bad hex) kept as is.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Two hex digits, checked as such: `from_str_radix` also takes a sign.
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    decoded
}

/// `text` with each of `spans` replaced by [`MASK`]; overlapping spans
/// make one mask.
fn mask(text: &str, mut spans: Vec<Range<usize>>) -> String {
    spans.sort_by_key(|span| span.start);
    let mut shown = String::with_capacity(text.len());
    let mut shown_to = 0;
    for span in spans {
        if span.start >= shown_to {
            shown.push_str(&text[shown_to..span.start]);
            shown.push_str(MASK);
            shown_to = span.end;
        } else {
            shown_to = shown_to.max(span.end);
        }
    }
    shown.push_str(&text[shown_to..]);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_of_the_user_info_is_masked_and_the_user_shown() {
        let cases = [
            (
                "redis://alice:s3cret@10.0.0.5:6380/2",
                "redis://alice:***@10.0.0.5:6380/2",
            ),
            ("rediss://:s3cret@h", "rediss://:***@h"),
            (
                "redis://alice:s3cret@127.0.0.1:notaport",
                "redis://alice:***@127.0.0.1:notaport",
            ),
            ("http://alice:s3cret@h:1", "http://alice:***@h:1"),
            ("redis://alice:s3 cret@h", "redis://alice:***@h"),
            ("redis://alice:s3cret@h?db=2", "redis://alice:***@h?db=2"),
            ("redis://alice:s3cret@", "redis://alice:***@"),
            // An `@`, `/`, `?`, `#` or `:` in a password, raw or encoded.
            ("redis://alice:s3@cret@h", "redis://alice:***@h"),
            ("redis://alice:s3%40cret@h", "redis://alice:***@h"),
            ("redis://alice:s3/c?r#e:t@h:1/0", "redis://alice:***@h:1/0"),
            ("redis:///alice:s3cret@h", "redis:///alice:***@h"),
            // No scheme, or garbage around it.
            ("alice:s3cret@h", "alice:***@h"),
            ("redis:alice:s3cret@h", "redis:***@h"),
            ("://:s3cret@", "://:***@"),
            ("é://ü:s3cret\u{fffd}@\u{0}", "é://ü:***@\u{0}"),
            ("redis://alice:***@h", "redis://alice:***@h"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_without_a_password_are_shown_as_given() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://alice@h",
            "redis://h:notaport",
            "unix:///tmp/r@b.sock",
            "unix:///tmp/r.sock?db=3&user=alice",
            "rediss://h#insecure",
            "",
            "@",
            ":",
            "://",
            "?",
            "&pass",
            "%",
            "\u{fffd}\u{0}%ff",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn the_pass_query_parameter_of_a_unix_url_is_masked() {
        let cases = [
            (
                "unix:///path/r.sock?user=alice&pass=s3cret&db=3",
                "unix:///path/r.sock?user=alice&pass=***&db=3",
            ),
            (
                "redis+unix:///r.sock?pass=s3cret",
                "redis+unix:///r.sock?pass=***",
            ),
            (
                "unix:///r.sock?password=s3cret",
                "unix:///r.sock?password=***",
            ),
            ("unix:///r.sock?PASS=s3cret#x", "unix:///r.sock?PASS=***"),
            ("unix:///r.sock?p%61ss=s3cret", "unix:///r.sock?p%61ss=***"),
            (
                "unix:///r.sock?pass=s3@cret&db=1",
                "unix:///r.sock?pass=***&db=1",
            ),
            ("unix:///r.sock?pass=s3:c@ret", "unix:///r.sock?pass=***"),
            ("unix:///r.sock?db=1&pass=", "unix:///r.sock?db=1&pass=***"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn every_url_in_a_line_of_text_is_masked() {
        let cases = [
            (
                r#"url = "redis://alice:s3cret@h:notaport" # was redis://bob:0ld@h"#,
                r#"url = "redis://alice:***@h:notaport" # was redis://bob:***@h"#,
            ),
            (
                r#"cluster = ["redis://a:s3cret@h1:7000", 'redis://b:s3cret@h2:7000']"#,
                r#"cluster = ["redis://a:***@h1:7000", 'redis://b:***@h2:7000']"#,
            ),
            (
                r#"url = "redis://alice:s3 \"cret@h""#,
                r#"url = "redis://alice:***@h""#,
            ),
            (
                "invalid redis URL \"alice:s3cret@h\": expected redis://host\nnext: a:b@c",
                "invalid redis URL \"alice:***@h\": expected redis://host\nnext: a:***@c",
            ),
            (
                "the store at cluster [redis://a:s3cret@h1:7000/2, redis://b:s3cret@h2]: redis://a:s3cret@h1:7000/2: only database 0",
                "the store at cluster [redis://a:***@h1:7000/2, redis://b:***@h2]: redis://a:***@h1:7000/2: only database 0",
            ),
            (
                "url = 'redis://alice:s3 cret@h' # the server's, redis://b:x@h",
                "url = 'redis://alice:***@h' # the server's, redis://b:***@h",
            ),
            // TOML's multi-line strings: three quotes open one.
            (
                "url = '''redis://alice:s3 cret@h:1'''",
                "url = '''redis://alice:***@h:1'''",
            ),
            (
                r#"url = """redis://alice:s3 cret@h:1""""#,
                r#"url = """redis://alice:***@h:1""""#,
            ),
            ("line 2: plain text", "line 2: plain text"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact_urls_in(text), shown, "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics_and_no_password_shows(
            garbage in "\\PC*",
            user in "[^:@]*",
            before in "[^@]*",
            after in "[^&]*",
            host in "[^@]*",
        ) {
            let _ = redact_url(&garbage);
            let _ = redact_urls_in(&garbage);
            let url = format!("redis://{user}:{before}S3CRET{after}@{host}");
            let shown = redact_url(&url);
            proptest::prop_assert!(!shown.contains("S3CRET") || user.contains("S3CRET") || host.contains("S3CRET"), "{shown}");
            let unix = format!("unix://{host}?{before}&pass={after}S3CRET");
            let shown = redact_url(&unix);
            proptest::prop_assert!(!shown.contains("S3CRET") || host.contains("S3CRET") || before.contains("S3CRET"), "{shown}");
        }
    }
}
