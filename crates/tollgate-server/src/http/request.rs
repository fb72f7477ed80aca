//! Decoding and checking what a caller sends, before anything is decided:
//! a request refused here has changed no state.

use std::borrow::Cow;

use serde::Deserialize;

use super::Rejection;

pub use tollgate_config::MAX_CLIENT_BYTES;

/// The largest request body accepted, in bytes (64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A decoded `POST /v1/check` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest<'a> {
    /// Who is asking.
    pub client: Cow<'a, str>,
    /// Units the request uses, from 1 to the configured maximum.
    pub cost: u32,
    /// A plan overriding the client's own.
    pub plan: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck<'a> {
    #[serde(borrow, default)]
    client: Field<Text<'a>>,
    #[serde(default)]
    cost: Field<Cost>,
    #[serde(borrow, default)]
    plan: Field<Text<'a>>,
}

/// A field of the body: left out, given as `null`, or given. serde reads
/// `null` into an `Option` as if the field were left out, so that
/// `"cost": null` would cost 1: a `null` is refused instead, saying so.
#[derive(Default)]
enum Field<T> {
    #[default]
    Absent,
    Null,
    Given(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(deserializer).map(|value| value.map_or(Field::Null, Field::Given))
    }
}

/// A `null` field's refusal: what to give instead.
fn null(field: &str, instead: &str) -> Rejection {
    Rejection::bad_request(format!("\"{field}\" is null: {instead}"))
}

/// A body's `cost` as sent. serde's own refusals of a `u64` speak of Rust's
/// types and do not name the field ("invalid value: integer `-1`, expected
/// u64"), and show a number past `u64` as the float serde_json read it
/// into: any JSON number is read here, and refused by [`decode_cost`] in
/// words (a number written with a fraction or an exponent is shown as the
/// float it is, e.g. `1e3` as `1000.0`).
enum Cost {
    /// A whole number that fits a `u64`, written without a fraction.
    Whole(u64),
    /// A whole number past `u64::MAX`.
    Huge,
    /// A negative number, or one written with a fraction or an exponent.
    NotWhole(String),
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CostVisitor)
    }
}

struct CostVisitor;

impl serde::de::Visitor<'_> for CostVisitor {
    type Value = Cost;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"cost\" as a whole number of units")
    }

    fn visit_u64<E>(self, cost: u64) -> Result<Cost, E> {
        Ok(Cost::Whole(cost))
    }

    fn visit_i64<E>(self, cost: i64) -> Result<Cost, E> {
        Ok(u64::try_from(cost).map_or_else(|_| Cost::NotWhole(cost.to_string()), Cost::Whole))
    }

    fn visit_f64<E>(self, cost: f64) -> Result<Cost, E> {
        // serde_json reads an integer past u64::MAX as a float.
        Ok(
            if cost.fract() == 0.0 && cost >= 18_446_744_073_709_551_616.0 {
                Cost::Huge
            } else {
                Cost::NotWhole(format!("{cost:?}"))
            },
        )
    }
}

/// A string of the body, borrowed from it unless it has escapes. serde
/// borrows a `Cow<str>` only when it is a field's own type: inside an
/// `Option` it would copy every client id into a new `String`.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Decodes a `POST /v1/check` body: `{"client": "...", "cost": 1, "plan": "..."}`,
/// `cost` defaulting to 1 and `plan` optional.
///
/// # Errors
/// A 400 [`Rejection`] naming the problem: not JSON, not an object, an unknown
/// field or one of the wrong type, a missing, empty or over-long client, a
/// cost that is not a whole number from 1 to `max_cost`.
pub fn decode_check(body: &[u8], max_cost: u32) -> Result<CheckRequest<'_>, Rejection> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Rejection::bad_request(
            "the request body is empty: expected JSON like {\"client\": \"alice\", \"cost\": 1}",
        ));
    }
    if body.starts_with(b"\xEF\xBB\xBF") {
        return Err(Rejection::bad_request(
            "the request body begins with a byte-order mark (EF BB BF), which JSON does not allow: send the object alone",
        ));
    }
    // serde would read the struct from an array of its fields too.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Rejection::bad_request(
            "the request body must be a JSON object like {\"client\": \"alice\", \"cost\": 1}",
        ));
    }
    let raw: RawCheck<'_> = serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "invalid request body",
            _ => "malformed JSON body",
        };
        Rejection::bad_request(format!("{what}: {e}"))
    })?;
    let client = match raw.client {
        Field::Given(text) => text.0,
        Field::Absent => {
            return Err(Rejection::bad_request(
                "missing field \"client\": say who is asking",
            ))
        }
        Field::Null => return Err(null("client", "say who is asking")),
    };
    check_client(&client)?;
    let cost = decode_cost(raw.cost, max_cost)?;
    let plan = match raw.plan {
        Field::Given(text) => Some(text.0),
        Field::Absent => None,
        Field::Null => return Err(null("plan", "give a plan name or leave the field out")),
    };
    if let Some(plan) = &plan {
        if plan.is_empty() {
            return Err(Rejection::bad_request(
                "\"plan\" is empty: give a plan name or leave the field out",
            ));
        }
    }
    Ok(CheckRequest { client, cost, plan })
}

/// The body's `cost`: 1 when left out, else a whole number from 1 to
/// `max_cost`.
///
/// # Errors
/// A 400 [`Rejection`] naming the field and its range: `null`, negative,
/// written with a fraction or an exponent, 0, over `max_cost` or past 2^64.
fn decode_cost(cost: Field<Cost>, max_cost: u32) -> Result<u32, Rejection> {
    let range = format!("a whole number from 1 to {max_cost}");
    match cost {
        Field::Given(Cost::Whole(cost)) => check_cost(cost, max_cost),
        Field::Absent => check_cost(1, max_cost),
        Field::Given(Cost::Huge) => Err(Rejection::bad_request(format!(
            "cost is over the maximum of {max_cost} per request (got a number past 2^64)"
        ))),
        Field::Given(Cost::NotWhole(text)) => Err(Rejection::bad_request(format!(
            "\"cost\" is {text}: give {range} (no sign, fraction or exponent), or leave the \
             field out (1)"
        ))),
        Field::Null => Err(null(
            "cost",
            &format!("give {range}, or leave the field out (1)"),
        )),
    }
}

/// `POST /v1/check` takes everything from its body, so a query string is
/// refused rather than ignored (a bare `?` says nothing and passes).
///
/// # Errors
/// A 400 [`Rejection`] quoting the query.
pub fn no_check_query(query: Option<&str>) -> Result<(), Rejection> {
    match query {
        None | Some("") => Ok(()),
        Some(query) => Err(Rejection::bad_request(format!(
            "POST /v1/check reads no query string (got ?{query}): send client, cost and plan \
             in the JSON body, e.g. {{\"client\": \"alice\", \"cost\": 1, \"plan\": \"free\"}}"
        ))),
    }
}

/// Checks a client id: not empty, at most [`MAX_CLIENT_BYTES`] bytes.
///
/// # Errors
/// A 400 [`Rejection`] saying which.
pub fn check_client(client: &str) -> Result<(), Rejection> {
    if client.is_empty() {
        return Err(Rejection::bad_request("the client id is empty"));
    }
    if client.len() > MAX_CLIENT_BYTES {
        return Err(Rejection::bad_request(format!(
            "the client id is {} bytes long, over the limit of {MAX_CLIENT_BYTES}",
            client.len()
        )));
    }
    Ok(())
}

/// Checks a cost: from 1 to `max_cost`.
///
/// # Errors
/// A 400 [`Rejection`] saying which bound was crossed.
pub fn check_cost(cost: u64, max_cost: u32) -> Result<u32, Rejection> {
    if cost == 0 {
        return Err(Rejection::bad_request(
            "cost must be at least 1 (to look without using anything, GET /v1/remaining/{client})",
        ));
    }
    u32::try_from(cost)
        .ok()
        .filter(|&c| c <= max_cost)
        .ok_or_else(|| {
            Rejection::bad_request(format!(
                "cost {cost} is over the maximum of {max_cost} per request"
            ))
        })
}

/// The optional `?plan=NAME` of `GET /v1/remaining/{client}` and `GET /v1/auth`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanQuery {
    /// A plan overriding the client's own.
    pub plan: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(body: &str) -> String {
        decode_check(body.as_bytes(), 1_000).unwrap_err().message
    }

    #[test]
    fn decodes_and_defaults() {
        let req = decode_check(br#"{"client":"a"}"#, 10).unwrap();
        assert_eq!((req.client.as_ref(), req.cost, req.plan), ("a", 1, None));
        assert!(matches!(req.client, Cow::Borrowed(_)));
        let req = decode_check(br#"{"client":"a\n","cost":3,"plan":"p"}"#, 10).unwrap();
        assert_eq!(req.client, "a\n");
        assert!(matches!(req.client, Cow::Owned(_)));
        assert!(matches!(req.plan, Some(Cow::Borrowed(_))));
        assert_eq!(req.cost, 3);
        assert_eq!(req.plan.as_deref(), Some("p"));
    }

    #[test]
    fn a_check_reads_no_query() {
        assert!(no_check_query(None).is_ok());
        assert!(no_check_query(Some("")).is_ok());
        let refused = no_check_query(Some("plan=gold")).unwrap_err();
        assert!(refused.message.contains("(got ?plan=gold)"), "{refused:?}");
    }

    #[test]
    fn every_mistake_is_named() {
        assert!(error("").contains("empty"));
        assert!(error("{").contains("malformed JSON"));
        assert!(error("[]").contains("must be a JSON object"));
        assert!(error(r#"["a", 1, null]"#).contains("must be a JSON object"));
        assert!(error("{}").contains("missing field \"client\""));
        assert!(error(r#"{"client":""}"#).contains("client id is empty"));
        assert!(error(&format!(r#"{{"client":"{}"}}"#, "x".repeat(257))).contains("257 bytes"));
        assert!(error(r#"{"client":"a","cost":0}"#).contains("at least 1"));
        assert!(error(r#"{"client":"a","cost":1001}"#).contains("over the maximum of 1000"));
        assert!(error(r#"{"client":"a","cots":1}"#).starts_with("invalid request body"));
        assert!(error(r#"{"client":"a","cots":1}"#).contains("unknown field"));
        assert!(error(r#"{"client":7}"#).contains("invalid type"));
        assert!(error(r#"{"client":"a","plan":""}"#).contains("plan"));
    }

    #[test]
    fn strings_of_the_wrong_type_are_named_exactly() {
        assert_eq!(
            error(r#"{"client":7}"#),
            "invalid request body: invalid type: integer `7`, expected a string at line 1 column 11"
        );
        assert_eq!(
            error(r#"{"client":"a","plan":{"x":1}}"#),
            "invalid request body: invalid type: map, expected a string at line 1 column 21"
        );
    }

    /// A cost that is not a whole number of units is refused naming the
    /// field and the range, not serde's Rust types ("expected u64"); one
    /// past 2^64 is not shown as a float the caller never wrote.
    #[test]
    fn a_cost_that_is_not_a_whole_number_names_the_field_and_the_range() {
        let instead =
            "give a whole number from 1 to 1000 (no sign, fraction or exponent), or leave the \
             field out (1)";
        for (cost, shown) in [
            ("-1", "-1"),
            ("1.5", "1.5"),
            ("1.0", "1.0"),
            ("1e3", "1000.0"),
        ] {
            let body = format!(r#"{{"client":"a","cost":{cost}}}"#);
            let message = format!("\"cost\" is {shown}: {instead}");
            assert_eq!(error(&body), message, "{cost}");
        }
        assert_eq!(
            error(r#"{"client":"a","cost":18446744073709551616}"#),
            "cost is over the maximum of 1000 per request (got a number past 2^64)"
        );
        assert_eq!(
            error(r#"{"client":"a","cost":18446744073709551615}"#),
            "cost 18446744073709551615 is over the maximum of 1000 per request"
        );
        assert_eq!(
            error(r#"{"client":"a","cost":"1"}"#),
            "invalid request body: invalid type: string \"1\", expected \"cost\" as a whole \
             number of units at line 1 column 24"
        );
    }
}
