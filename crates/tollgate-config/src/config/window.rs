//! Durations in the config: `"250ms"`, `"1s"`, `"15m"`, `"2h"`, `"1d"`, or a
//! bare integer of milliseconds.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration in whole milliseconds, as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub u64);

const UNITS: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Parses `"<digits><unit>"` with unit `ms`, `s`, `m`, `h` or `d`.
///
/// # Errors
/// A message saying what is wrong, for the config error.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let bad = || {
        format!(
            "invalid duration {text:?}: expected a whole number and a unit, e.g. \"250ms\", \"1s\", \"15m\", \"2h\", \"1d\", or an integer of milliseconds"
        )
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let scale = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, scale)| *scale)
        .ok_or_else(bad)?;
    let count: u64 = digits
        .parse()
        .map_err(|_| format!("duration {text:?} is too large"))?;
    count
        .checked_mul(scale)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

/// Milliseconds in the largest unit that divides them evenly (`"1d"`, `"250ms"`).
pub fn format_duration(ms: u64) -> String {
    UNITS
        .iter()
        .rev()
        .find(|(_, scale)| ms != 0 && ms.is_multiple_of(*scale))
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, scale)| format!("{}{unit}", ms / scale),
        )
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MillisVisitor;

        impl Visitor<'_> for MillisVisitor {
            type Value = Millis;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration such as \"1s\", \"15m\", \"1d\" or an integer of milliseconds",
                )
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                u64::try_from(v)
                    .map(Millis)
                    .map_err(|_| E::custom(format!("duration must not be negative (got {v})")))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Millis, E> {
                Ok(Millis(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                parse_duration(v).map(Millis).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(MillisVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("1s"), Ok(1_000));
        assert_eq!(parse_duration("15m"), Ok(900_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert!(parse_duration("1 s").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1w").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("999999999999999d").is_err());
    }

    #[test]
    fn formatting_picks_the_largest_even_unit() {
        assert_eq!(format_duration(86_400_000), "1d");
        assert_eq!(format_duration(90_000), "90s");
        assert_eq!(format_duration(250), "250ms");
        assert_eq!(format_duration(0), "0ms");
    }
}
