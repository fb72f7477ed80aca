//! The log formats `simulate` reads, and what it takes from each line: the
//! client id and the request's time.

use super::combined;
use super::csv::CsvSplitter;
use super::jsonl::{self, TimeValue};
use super::time::TimeCache;

/// A log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// nginx/Apache "combined" (client: `remote_addr`, time: `time_local`).
    Combined,
    /// JSON lines (client: `client`, time: `time`).
    Json,
    /// CSV with a header line (client: `client`, time: `time`).
    Csv,
}

/// What one line gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A blank line, or a CSV header: no request.
    Nothing,
    /// A request.
    Request {
        /// The client id, checked as `serve` checks it.
        client: &'a str,
        /// Epoch milliseconds.
        time_ms: u64,
    },
}

/// Why a line gave no request.
#[derive(Debug, PartialEq, Eq)]
pub enum LineError {
    /// This line is malformed: counted, and the run goes on.
    Malformed(String),
    /// The file cannot be read as asked (a CSV header without the named
    /// columns): the run stops before deciding anything.
    Fatal(String),
}

/// Takes the client and time out of lines of one file.
pub struct LineParser {
    kind: Kind,
    times: TimeCache,
    owned: String,
}

enum Kind {
    Combined {
        client: usize,
        time: usize,
    },
    Json {
        client: String,
        time: String,
    },
    Csv {
        client: String,
        time: String,
        columns: Option<(usize, usize)>,
        splitter: Box<CsvSplitter>,
    },
}

impl LineParser {
    /// A parser for `format`, the client and time in the named fields (or
    /// the format's defaults).
    ///
    /// # Errors
    /// A message when a field name is empty (in every format, before any
    /// line is read: no field is named ""), a combined-log field name is
    /// unknown, or both name the same field.
    pub fn new(format: Format, client: Option<&str>, time: Option<&str>) -> Result<Self, String> {
        for (flag, given, what) in [("--client", client, "client id"), ("--time", time, "time")] {
            if given == Some("") {
                return Err(format!(
                    "{flag} is empty: name the field holding the {what}, or leave {flag} out for the format's default"
                ));
            }
        }
        let kind = match format {
            Format::Combined => Kind::Combined {
                client: combined::field_index(client.unwrap_or("remote_addr"))?,
                time: combined::field_index(time.unwrap_or("time_local"))?,
            },
            Format::Json => Kind::Json {
                client: client.unwrap_or("client").to_owned(),
                time: time.unwrap_or("time").to_owned(),
            },
            Format::Csv => Kind::Csv {
                client: client.unwrap_or("client").to_owned(),
                time: time.unwrap_or("time").to_owned(),
                columns: None,
                splitter: Box::default(),
            },
        };
        let same = match &kind {
            Kind::Combined { client, time } => client == time,
            Kind::Json { client, time } | Kind::Csv { client, time, .. } => client == time,
        };
        if same {
            return Err("--client and --time name the same field".to_owned());
        }
        Ok(Self {
            kind,
            times: TimeCache::default(),
            owned: String::new(),
        })
    }

    /// Reads one line (without its `\n`).
    ///
    /// # Errors
    /// [`LineError`]: a malformed line, or a header that makes the file unusable.
    pub fn parse<'a>(&'a mut self, line: &'a [u8]) -> Result<Parsed<'a>, LineError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Parsed::Nothing);
        }
        let malformed = LineError::Malformed;
        let (client, time_ms) = match &mut self.kind {
            Kind::Combined { client, time } => {
                let text = std::str::from_utf8(line).map_err(|e| {
                    malformed(format!(
                        "not valid UTF-8 (bad byte at column {})",
                        e.valid_up_to() + 1
                    ))
                })?;
                let (client, time) =
                    combined::two_fields(text, *client, *time).map_err(malformed)?;
                (client, self.times.parse(time).map_err(malformed)?)
            }
            Kind::Json { client, time } => {
                let found = jsonl::extract(line, client, time).map_err(malformed)?;
                let time_ms = match found.time {
                    None => return Err(malformed(format!("no key {time:?}"))),
                    Some(value) => json_time(value, &mut self.times).map_err(malformed)?,
                };
                let value = found
                    .client
                    .ok_or_else(|| malformed(format!("no key {client:?}")))?;
                self.owned.clear();
                self.owned.push_str(&value);
                (self.owned.as_str(), time_ms)
            }
            Kind::Csv {
                client,
                time,
                columns,
                splitter,
            } => {
                splitter.split(line).map_err(|e| match columns {
                    None => LineError::Fatal(format!("the CSV header: {e}")),
                    Some(_) => malformed(e),
                })?;
                let Some((client_at, time_at)) = *columns else {
                    let found = (splitter.column(client), splitter.column(time));
                    *columns = Some((
                        found.0.map_err(LineError::Fatal)?,
                        found.1.map_err(LineError::Fatal)?,
                    ));
                    return Ok(Parsed::Nothing);
                };
                let time_ms = self
                    .times
                    .parse(splitter.field(time_at).map_err(malformed)?)
                    .map_err(malformed)?;
                (splitter.field(client_at).map_err(malformed)?, time_ms)
            }
        };
        check_client(client).map_err(malformed)?;
        Ok(Parsed::Request { client, time_ms })
    }
}

/// A client id as `serve` accepts it: not empty, at most 256 bytes, and
/// not `-` (how logs write a missing value).
fn check_client(client: &str) -> Result<(), String> {
    if client == "-" {
        return Err("no client id (the field is \"-\")".to_owned());
    }
    tollgate_server::http::check_client(client).map_err(|rejection| rejection.message)
}

/// A JSON time value in epoch milliseconds.
fn json_time(value: TimeValue<'_>, times: &mut TimeCache) -> Result<u64, String> {
    match value {
        TimeValue::Millis(ms) => Ok(ms),
        TimeValue::Negative => Err("the time is negative".to_owned()),
        TimeValue::Seconds(seconds) => {
            // Rounded, not cut: 1764669600.123 is 1764669600122.9999 in binary.
            let ms = (seconds * 1000.0).round();
            if ms.is_finite() && ms >= 0.0 && ms < 2f64.powi(63) {
                // In range and whole: the conversion is exact.
                Ok(ms as u64)
            } else {
                Err(format!(
                    "time {} is out of range for epoch seconds",
                    jsonl::show_float(seconds)
                ))
            }
        }
        TimeValue::Text(text) => times.parse(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parser(format: Format) -> LineParser {
        LineParser::new(format, None, None).unwrap()
    }

    #[test]
    fn each_format_gives_the_client_and_time() {
        let at = 1_764_669_600_000;
        let line = br#"10.1.2.3 - - [02/Dec/2025:10:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "x""#;
        let want = Parsed::Request {
            client: "10.1.2.3",
            time_ms: at,
        };
        assert_eq!(parser(Format::Combined).parse(line), Ok(want));
        let mut json = parser(Format::Json);
        let want = Parsed::Request {
            client: "a",
            time_ms: at + 5,
        };
        assert_eq!(
            json.parse(br#"{"client":"a","time":1764669600005}"#),
            Ok(want)
        );
        let mut csv = parser(Format::Csv);
        assert_eq!(csv.parse(b"client,time\r"), Ok(Parsed::Nothing));
        assert_eq!(csv.parse(b" "), Ok(Parsed::Nothing));
        let want = Parsed::Request {
            client: "b",
            time_ms: at + 7,
        };
        assert_eq!(csv.parse(b"b,2025-12-02T10:00:00.007Z\r"), Ok(want));
    }

    #[test]
    fn a_missing_client_is_malformed_and_a_bad_header_is_fatal() {
        let line = br#"- - - [02/Dec/2025:10:00:00 +0000] "GET / HTTP/1.1""#;
        let error = parser(Format::Combined).parse(line).unwrap_err();
        assert_eq!(
            error,
            LineError::Malformed("no client id (the field is \"-\")".into())
        );
        let long = format!(r#"{{"client":"{}","time":1}}"#, "x".repeat(257));
        let error = parser(Format::Json).parse(long.as_bytes()).unwrap_err();
        assert!(matches!(error, LineError::Malformed(m) if m.contains("257 bytes")));
        let error = parser(Format::Csv).parse(b"ip,time").unwrap_err();
        assert!(matches!(error, LineError::Fatal(m) if m.contains("no column \"client\"")));
        assert!(LineParser::new(Format::Json, Some("t"), Some("t")).is_err());
    }

    #[test]
    fn a_json_value_of_the_wrong_type_is_named_by_its_field() {
        let mut json = parser(Format::Json);
        for (line, says) in [
            (
                &br#"{"client":7.5,"time":1}"#[..],
                "field \"client\": expected a client id (a string or a whole number), got floating point 7.5",
            ),
            (
                br#"{"time":1,"client":true}"#,
                "field \"client\": expected a client id (a string or a whole number), got boolean true",
            ),
            (
                br#"{"client":"a","time":null}"#,
                "field \"time\": expected a time (a number or a string), got null",
            ),
            (
                br#"{"client":["a"],"time":{"s":1}}"#,
                "field \"client\": expected a client id (a string or a whole number), got an array",
            ),
            (
                br#"{"client":"a","time":{"s":[1,{"t":2}]}}"#,
                "field \"time\": expected a time (a number or a string), got an object",
            ),
        ] {
            let error = json.parse(line).unwrap_err();
            assert_eq!(
                error,
                LineError::Malformed(says.to_owned()),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Renamed fields are named as given.
        let mut named = LineParser::new(Format::Json, Some("who"), Some("at")).unwrap();
        assert_eq!(
            named.parse(br#"{"who":"a","at":false}"#).unwrap_err(),
            LineError::Malformed(
                "field \"at\": expected a time (a number or a string), got boolean false".into()
            )
        );
        // Only a line that is no JSON object says so.
        for line in [&br#"[1,2]"#[..], br#""client""#, br#"{"client":7.5"#] {
            let error = json.parse(line).unwrap_err();
            assert!(
                matches!(&error, LineError::Malformed(m) if m.starts_with("not a JSON object: ")),
                "{}: {error:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn a_json_time_out_of_range_is_shown_as_the_number_it_is() {
        let mut json = parser(Format::Json);
        for (line, says) in [
            (
                &br#"{"client":"a","time":1e300}"#[..],
                "time 1e300 is out of range for epoch seconds",
            ),
            (
                br#"{"client":"a","time":-1.5e300}"#,
                "time -1.5e300 is out of range for epoch seconds",
            ),
            (
                br#"{"client":"a","time":-2.5}"#,
                "time -2.5 is out of range for epoch seconds",
            ),
            (
                br#"{"client":"a","time":100000000000000000000}"#,
                "time 100000000000000000000 is out of range for epoch seconds",
            ),
        ] {
            assert_eq!(
                json.parse(line).unwrap_err(),
                LineError::Malformed(says.to_owned()),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn an_empty_field_name_is_refused_up_front_in_every_format() {
        for format in [Format::Combined, Format::Json, Format::Csv] {
            for (client, time, flag, what) in [
                (Some(""), None, "--client", "client id"),
                (None, Some(""), "--time", "time"),
            ] {
                let error = LineParser::new(format, client, time).err();
                assert_eq!(
                    error,
                    Some(format!(
                        "{flag} is empty: name the field holding the {what}, or leave {flag} out for the format's default"
                    )),
                    "{format:?}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..8)) {
            for format in [Format::Combined, Format::Json, Format::Csv] {
                let mut parser = parser(format);
                for line in &lines {
                    let _ = parser.parse(line);
                }
            }
        }
    }
}
