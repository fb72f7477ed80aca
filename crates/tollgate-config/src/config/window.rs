//! Durations in the config: `"250ms"`, `"1s"`, `"15m"`, `"2h"`, `"1d"` (the
//! core's one format, [`tollgate::parse_duration`], as on the command line),
//! or an integer of milliseconds.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration in whole milliseconds, as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub u64);

pub use tollgate::{format_duration, parse_duration};

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
