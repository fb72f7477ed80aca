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
/// A message for invalid JSON or a value that is not an object (`not a
/// JSON object: ...`), or for a client or time of the wrong type, naming
/// the field: `field "client": expected a client id (a string or a whole
/// number), got floating point 7.5`.
pub fn extract<'de>(line: &'de [u8], client: &str, time: &str) -> Result<Found<'de>, String> {
    let mut reader = serde_json::Deserializer::from_slice(line);
    let found = reader
        .deserialize_map(Object(Wanted { client, time }))
        .map_err(|e| format!("not a JSON object: {e}"))?;
    reader
        .end()
        .map_err(|e| format!("text after the JSON object: {e}"))?;
    found.map_err(|wrong| {
        let (field, expected, got) = match wrong {
            WrongType::Client(got) => (client, "a client id (a string or a whole number)", got),
            WrongType::Time(got) => (time, "a time (a number or a string)", got),
        };
        format!("field {field:?}: expected {expected}, got {got}")
    })
}

/// A wanted field whose value has a type it cannot have, and what the
/// value is instead: the line is a JSON object all the same, so this is
/// not a JSON error (serde's would say "not a JSON object" and a column,
/// not which field).
enum WrongType {
    Client(Unwanted),
    Time(Unwanted),
}

/// A JSON value that a wanted field may not hold (a number with a
/// fraction only the time may), for a message: its type, and its value
/// when short (numbers and booleans).
enum Unwanted {
    Float(f64),
    Bool(bool),
    Null,
    Array,
    Object,
}

impl fmt::Display for Unwanted {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Unwanted::Float(v) => write!(f, "floating point {}", show_float(*v)),
            Unwanted::Bool(v) => write!(f, "boolean {v}"),
            Unwanted::Null => f.write_str("null"),
            Unwanted::Array => f.write_str("an array"),
            Unwanted::Object => f.write_str("an object"),
        }
    }
}

/// A JSON number read as a float, for a message: as Rust writes it when
/// that is short (`7.5`, `1764669600.123`), else in scientific notation
/// (`1e300`, not a 301-digit expansion, and never cut short into another
/// number). Either is the shortest text that reads back as the same value.
pub fn show_float(value: f64) -> String {
    let plain = value.to_string();
    if plain.len() <= 24 {
        plain
    } else {
        format!("{value:e}")
    }
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
    /// The two values, or the first wanted field of the wrong type (the
    /// rest of the object is still read, so that a line that is not JSON
    /// is told apart).
    type Value = Result<Found<'de>, WrongType>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = Found::default();
        let mut wrong = None;
        while let Some(key) = map.next_key_seed(self.0)? {
            let wrong_here = match key {
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    None
                }
                Key::Client => match map.next_value::<Scalar<'de>>()?.client() {
                    Ok(client) => {
                        found.client = Some(client);
                        None
                    }
                    Err(got) => Some(WrongType::Client(got)),
                },
                Key::Time => match map.next_value::<Scalar<'de>>()?.time() {
                    Ok(time) => {
                        found.time = Some(time);
                        None
                    }
                    Err(got) => Some(WrongType::Time(got)),
                },
            };
            wrong = wrong.or(wrong_here);
        }
        Ok(wrong.map_or(Ok(found), Err))
    }
}

/// The value of a wanted field, of any JSON type: a string or a number
/// as read, anything else only described (an array or object is read to
/// its end and skipped). Each field then takes the types it can hold
/// ([`Scalar::client`], [`Scalar::time`]), so that a wrong type is named
/// with its field rather than failing the line as JSON.
enum Scalar<'de> {
    Text(Cow<'de, str>),
    Whole(u64),
    Negative(i64),
    Float(f64),
    Other(Unwanted),
}

impl<'de> Scalar<'de> {
    /// A client id: a string, or a whole number written as text.
    fn client(self) -> Result<Cow<'de, str>, Unwanted> {
        match self {
            Scalar::Text(text) => Ok(text),
            Scalar::Whole(v) => Ok(Cow::Owned(v.to_string())),
            Scalar::Negative(v) => Ok(Cow::Owned(v.to_string())),
            Scalar::Float(v) => Err(Unwanted::Float(v)),
            Scalar::Other(other) => Err(other),
        }
    }

    /// A time: any number, or a string.
    fn time(self) -> Result<TimeValue<'de>, Unwanted> {
        match self {
            Scalar::Text(text) => Ok(TimeValue::Text(text)),
            Scalar::Whole(v) => Ok(TimeValue::Millis(v)),
            Scalar::Negative(_) => Ok(TimeValue::Negative),
            Scalar::Float(v) => Ok(TimeValue::Seconds(v)),
            Scalar::Other(other) => Err(other),
        }
    }
}

impl<'de> de::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Text(Cow::Owned(v.to_owned())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::Whole(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u64::try_from(v).map_or(Scalar::Negative(v), Scalar::Whole))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Other(Unwanted::Bool(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Other(Unwanted::Null))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other(Unwanted::Array))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other(Unwanted::Object))
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
