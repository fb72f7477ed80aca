//! JSON lines: one object per line; the client and the time are two of its
//! top-level keys. Only those two values are decoded (`serde_json` skips
//! the rest without building it), so wide log objects stay cheap.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer as _;

/// A time as a JSON log holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeValue<'de> {
    /// A whole non-negative number: epoch milliseconds.
    Millis(u64),
    /// A negative whole number.
    Negative,
    /// A number with a fraction: epoch seconds.
    Seconds(f64),
    /// A string, parsed like a time field of any format.
    Text(Cow<'de, str>),
}

/// The two values wanted from one JSON line (`None`: the key is absent).
#[derive(Debug, Default)]
pub struct Found<'de> {
    /// The client id (a string, or a whole number written as text).
    pub client: Option<Cow<'de, str>>,
    /// The time.
    pub time: Option<TimeValue<'de>>,
}

/// Reads the keys `client` and `time` from one line holding a JSON object.
///
/// # Errors
/// A message for invalid JSON, a value that is not an object, or a client
/// or time of the wrong type.
pub fn extract<'de>(line: &'de [u8], client: &str, time: &str) -> Result<Found<'de>, String> {
    let mut reader = serde_json::Deserializer::from_slice(line);
    let found = reader
        .deserialize_map(Object(Wanted { client, time }))
        .map_err(|e| format!("not a JSON object: {e}"))?;
    reader
        .end()
        .map_err(|e| format!("text after the JSON object: {e}"))?;
    Ok(found)
}

#[derive(Clone, Copy)]
struct Wanted<'f> {
    client: &'f str,
    time: &'f str,
}

enum Key {
    Client,
    Time,
    Other,
}

impl<'de> DeserializeSeed<'de> for Wanted<'_> {
    type Value = Key;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Wanted<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        Ok(if key == self.client {
            Key::Client
        } else if key == self.time {
            Key::Time
        } else {
            Key::Other
        })
    }
}

/// Visits the object; a type apart from `Wanted`, which visits keys.
struct Object<'f>(Wanted<'f>);

impl<'de> Visitor<'de> for Object<'_> {
    type Value = Found<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found<'de>, A::Error> {
        let mut found = Found::default();
        while let Some(key) = map.next_key_seed(self.0)? {
            match key {
                Key::Client => found.client = Some(map.next_value::<ClientValue<'de>>()?.0),
                Key::Time => found.time = Some(map.next_value::<TimeSeed<'de>>()?.0),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

struct ClientValue<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for ClientValue<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ClientVisitor)
    }
}

struct ClientVisitor;

impl<'de> Visitor<'de> for ClientVisitor {
    type Value = ClientValue<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a client id (a string or a whole number)")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(ClientValue(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ClientValue(Cow::Owned(v.to_owned())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(ClientValue(Cow::Owned(v.to_string())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(ClientValue(Cow::Owned(v.to_string())))
    }
}

struct TimeSeed<'de>(TimeValue<'de>);

impl<'de> de::Deserialize<'de> for TimeSeed<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TimeVisitor)
    }
}

struct TimeVisitor;

impl<'de> Visitor<'de> for TimeVisitor {
    type Value = TimeSeed<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a time (a number or a string)")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(TimeSeed(TimeValue::Text(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(TimeSeed(TimeValue::Text(Cow::Owned(v.to_owned()))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(TimeSeed(TimeValue::Millis(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(TimeSeed(
            u64::try_from(v).map_or(TimeValue::Negative, TimeValue::Millis),
        ))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(TimeSeed(TimeValue::Seconds(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_keys_are_taken_whatever_else_the_object_holds() {
        let line = br#"{"path":"/x","nested":{"client":"no"},"client":"alice","time":1500,"list":[1,{"a":null}]}"#;
        let found = extract(line, "client", "time").unwrap();
        assert_eq!(found.client.as_deref(), Some("alice"));
        assert_eq!(found.time, Some(TimeValue::Millis(1500)));
        assert!(matches!(found.client, Some(Cow::Borrowed(_))));
    }

    #[test]
    fn numbers_escapes_and_other_names() {
        let line = br#"{"user":42,"ts":"2026-12-02T10:00:00Z","x":"a\"b"}"#;
        let found = extract(line, "user", "ts").unwrap();
        assert_eq!(found.client.as_deref(), Some("42"));
        assert_eq!(
            found.time,
            Some(TimeValue::Text("2026-12-02T10:00:00Z".into()))
        );
        let found = extract(br#"{"c":"a\u00e9","t":1.5}"#, "c", "t").unwrap();
        assert_eq!(found.client.as_deref(), Some("a\u{e9}"));
        assert_eq!(found.time, Some(TimeValue::Seconds(1.5)));
        assert_eq!(
            extract(br#"{"t":-3}"#, "c", "t").unwrap().time,
            Some(TimeValue::Negative)
        );
        assert!(extract(br#"{"t":-3}"#, "c", "t").unwrap().client.is_none());
    }

    #[test]
    fn what_is_not_an_object_or_has_bad_types_is_refused() {
        for (line, says) in [
            (&br#"[1,2]"#[..], "not a JSON object"),
            (br#"{"client":"a""#, "not a JSON object"),
            (br#"{"client":"a"} x"#, "text after"),
            (br#"{"client":true}"#, "client id"),
            (br#"{"client":"a","time":null}"#, "a time"),
        ] {
            let error = extract(line, "client", "time").unwrap_err();
            assert!(
                error.contains(says),
                "{}: {error}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
