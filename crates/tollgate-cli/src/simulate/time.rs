//! Request times as logs write them, to epoch milliseconds.
//!
//! - a whole number: epoch milliseconds (`1764669600123`);
//! - a number with a fraction: epoch seconds (nginx's `$msec`,
//!   `1764669600.123`), fractions below the millisecond dropped;
//! - the common log format's `10/Oct/2000:13:55:36 -0700` (Apache `%t`,
//!   nginx `$time_local`), optionally with a fraction of a second
//!   (`13:55:36.123`);
//! - anything else: RFC 3339 (`2025-12-02T10:00:00.123Z`, nginx `$time_iso8601`).
//!
//! Parsing dates is `chrono`'s job; this file only picks the format. Logs
//! repeat one time over many lines, so [`TimeCache`] remembers the last.

use chrono::DateTime;

/// Parses one time field to epoch milliseconds.
///
/// # Errors
/// A message saying what the field is not (or that it is before 1970).
pub fn parse_time(text: &str) -> Result<u64, String> {
    let shown = shorten(text);
    if text.is_empty() {
        return Err("the time is empty".to_owned());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("time {shown:?} is too large for epoch milliseconds"));
    }
    if let Some((seconds, fraction)) = text.split_once('.') {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(seconds) && digits(fraction) {
            return epoch_seconds(seconds, fraction)
                .ok_or_else(|| format!("time {shown:?} is too large for epoch seconds"));
        }
    }
    let parsed = if text.contains('/') {
        DateTime::parse_from_str(text, "%d/%b/%Y:%H:%M:%S%.f %z")
            .map_err(|e| format!("time {shown:?} is not a common log format time like 10/Oct/2000:13:55:36 -0700 ({e})"))?
    } else {
        DateTime::parse_from_rfc3339(text).map_err(|e| {
            format!("time {shown:?} is not epoch milliseconds, epoch seconds with a fraction, RFC 3339 or a common log format time ({e})")
        })?
    };
    u64::try_from(parsed.timestamp_millis()).map_err(|_| format!("time {shown:?} is before 1970"))
}

/// `seconds.fraction` in milliseconds, the fraction cut to three digits.
fn epoch_seconds(seconds: &str, fraction: &str) -> Option<u64> {
    let seconds: u64 = seconds.parse().ok()?;
    let mut millis = 0;
    for position in 0..3 {
        let digit = fraction.as_bytes().get(position).map_or(0, |b| b - b'0');
        millis = millis * 10 + u64::from(digit);
    }
    seconds.checked_mul(1000)?.checked_add(millis)
}

/// Shortens a field quoted in an error message.
pub fn shorten(text: &str) -> &str {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// The last time text parsed and its value: consecutive log lines mostly
/// share their second, so most lines skip the date arithmetic.
#[derive(Default)]
pub struct TimeCache {
    text: String,
    value: Option<u64>,
}

impl TimeCache {
    /// [`parse_time`], remembered for the next identical text.
    ///
    /// # Errors
    /// As [`parse_time`].
    pub fn parse(&mut self, text: &str) -> Result<u64, String> {
        if let Some(value) = self.value {
            if self.text == text {
                return Ok(value);
            }
        }
        let value = parse_time(text)?;
        self.text.clear();
        self.text.push_str(text);
        self.value = Some(value);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_form_gives_epoch_milliseconds() {
        // 2025-12-02T10:00:00Z is 1764669600 s after the epoch.
        let at = 1_764_669_600_000;
        assert_eq!(parse_time("1764669600123"), Ok(at + 123));
        assert_eq!(parse_time("1764669600.123"), Ok(at + 123));
        assert_eq!(parse_time("1764669600.1"), Ok(at + 100));
        assert_eq!(parse_time("1764669600.123999"), Ok(at + 123));
        assert_eq!(parse_time("02/Dec/2025:10:00:00 +0000"), Ok(at));
        assert_eq!(parse_time("02/Dec/2025:11:00:00 +0100"), Ok(at));
        assert_eq!(parse_time("02/Dec/2025:10:00:00.250 +0000"), Ok(at + 250));
        assert_eq!(parse_time("2025-12-02T10:00:00Z"), Ok(at));
        assert_eq!(parse_time("2025-12-02T10:00:00.007+00:00"), Ok(at + 7));
        assert_eq!(parse_time("2025-12-02T04:00:00.5-06:00"), Ok(at + 500));
    }

    #[test]
    fn bad_times_say_what_is_wrong() {
        for (text, says) in [
            ("", "empty"),
            ("1969-12-31T23:59:59Z", "before 1970"),
            ("99999999999999999999999", "too large"),
            ("yesterday", "not epoch milliseconds"),
            ("32/Dec/2026:10:00:00 +0000", "common log format"),
            ("-5", "not epoch milliseconds"),
        ] {
            let error = parse_time(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_cache_gives_the_same_answers() {
        let mut cache = TimeCache::default();
        for text in ["1000", "1000", "2000", "bad", "2000", "1000"] {
            assert_eq!(cache.parse(text), parse_time(text), "{text}");
        }
    }
}
