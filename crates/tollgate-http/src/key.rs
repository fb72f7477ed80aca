//! Who is calling: the client key read from a request's headers, by the
//! same rules in every front end.

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::KeyError;

/// The `X-Api-Key` header field name.
pub const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// HTTP's white space around a field value (RFC 9110's OWS). Only these
/// are trimmed: a Unicode space (say U+00A0) is part of a key, as it is in
/// a JSON check or an Envoy descriptor, so that one key is one client in
/// every front end.
const HTTP_WHITE_SPACE: [char; 2] = [' ', '\t'];

/// The value of the header `name`, trimmed of spaces and tabs.
///
/// # Errors
/// [`KeyError::MissingHeader`], [`KeyError::Repeated`] (more than one
/// value), [`KeyError::EmptyHeader`] (only white space),
/// [`KeyError::TooLong`] (over [`tollgate::MAX_CLIENT_BYTES`]) or
/// [`KeyError::NotUtf8`].
pub fn header_key(headers: &HeaderMap, name: &HeaderName) -> Result<String, KeyError> {
    let value = only_value(headers, name)?.ok_or_else(|| KeyError::MissingHeader(name.clone()))?;
    let text = std::str::from_utf8(value.as_bytes())
        .map_err(|_| KeyError::NotUtf8(name.clone()))?
        .trim_matches(HTTP_WHITE_SPACE);
    if text.is_empty() {
        return Err(KeyError::EmptyHeader(name.clone()));
    }
    client_id(name, text)
}

/// The caller's API key: the token of `Authorization: Bearer TOKEN` (the
/// scheme in any case), or else the `X-Api-Key` header. An `Authorization`
/// header of another scheme (say `Basic` for the API's own users) is not an
/// API key, so `X-Api-Key` is read then.
///
/// # Errors
/// [`KeyError::NotBearer`] when `Authorization` is there but not a bearer
/// token and `X-Api-Key` is missing; [`KeyError::MissingApiKey`] when
/// neither is there; [`KeyError::Repeated`] when `Authorization` (or, beside
/// a bearer token, `X-Api-Key`) is given more than once; [`KeyError::TooLong`] for a bearer token over
/// [`tollgate::MAX_CLIENT_BYTES`]; [`KeyError::TwoApiKeys`] when a bearer
/// token and `X-Api-Key` are both there and differ; what [`header_key`]
/// says of a bad `X-Api-Key`.
pub fn api_key(headers: &HeaderMap) -> Result<String, KeyError> {
    let authorization = only_value(headers, &AUTHORIZATION)?;
    let bearer = authorization
        .map(|v| bearer_token(v.as_bytes()))
        .transpose()?;
    if let Some(token) = bearer.flatten() {
        let other = only_value(headers, &X_API_KEY)?
            .map(|v| v.as_bytes().trim_ascii())
            .filter(|v| !v.is_empty());
        if other.is_some_and(|other| other != token.as_bytes()) {
            return Err(KeyError::TwoApiKeys);
        }
        return client_id(&AUTHORIZATION, token);
    }
    match header_key(headers, &X_API_KEY) {
        Err(KeyError::MissingHeader(_)) if authorization.is_some() => Err(KeyError::NotBearer),
        Err(KeyError::MissingHeader(_)) => Err(KeyError::MissingApiKey),
        other => other,
    }
}

/// The one value of the header `name`, if any: given twice, which names
/// the client is anyone's guess, so it is [`KeyError::Repeated`].
fn only_value<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a HeaderValue>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    match values.next() {
        Some(_) => Err(KeyError::Repeated(name.clone())),
        None => Ok(first),
    }
}

/// `text`, read from the header `name`, as a client id: at most
/// [`tollgate::MAX_CLIENT_BYTES`] long.
fn client_id(name: &HeaderName, text: &str) -> Result<String, KeyError> {
    if text.len() > tollgate::MAX_CLIENT_BYTES {
        return Err(KeyError::TooLong {
            name: name.clone(),
            bytes: text.len(),
        });
    }
    Ok(text.to_owned())
}

/// The token of a `Bearer TOKEN` credential, if that is what `value` is;
/// [`KeyError::NotUtf8`] for a bearer token that is not UTF-8 (a key no
/// client id can be).
fn bearer_token(value: &[u8]) -> Result<Option<&str>, KeyError> {
    let value = value.trim_ascii();
    let is_bearer = value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer ");
    let Ok(text) = std::str::from_utf8(value) else {
        return match is_bearer {
            true => Err(KeyError::NotUtf8(AUTHORIZATION)),
            false => Ok(None),
        };
    };
    let Some((scheme, token)) = text.split_once(' ') else {
        return Ok(None);
    };
    let token = token.trim_matches(HTTP_WHITE_SPACE);
    Ok((scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_bytes(value).unwrap());
        }
        map
    }

    #[test]
    fn header_key_trims_and_names_what_is_wrong() {
        let name = HeaderName::from_static("x-client-id");
        let key = |pairs: &[(&'static str, &[u8])]| header_key(&headers(pairs), &name);
        assert_eq!(key(&[("x-client-id", b" alice ")]).unwrap(), "alice");
        assert_eq!(key(&[("x-client-id", "zoë".as_bytes())]).unwrap(), "zoë");
        assert_eq!(key(&[]), Err(KeyError::MissingHeader(name.clone())));
        assert_eq!(
            key(&[("x-client-id", b"  ")]),
            Err(KeyError::EmptyHeader(name.clone()))
        );
        assert_eq!(
            key(&[("x-client-id", b"\xff")]),
            Err(KeyError::NotUtf8(name.clone()))
        );
        assert!(KeyError::MissingHeader(name.clone())
            .to_string()
            .contains("x-client-id"));
        let longest = "k".repeat(tollgate::MAX_CLIENT_BYTES);
        assert_eq!(
            key(&[("x-client-id", longest.as_bytes())]).unwrap(),
            longest
        );
        let over = format!(" {longest}k ");
        assert_eq!(
            key(&[("x-client-id", over.as_bytes())]),
            Err(KeyError::TooLong {
                name,
                bytes: tollgate::MAX_CLIENT_BYTES + 1
            })
        );
    }

    /// Only HTTP's white space (SP, HTAB) is trimmed: `k` and `k` followed
    /// by a no-break space (or any other Unicode space) are two clients, as
    /// they are in a JSON check or an Envoy descriptor.
    #[test]
    fn only_spaces_and_tabs_are_trimmed() {
        let name = HeaderName::from_static("x-client-id");
        for odd in ["k\u{a0}", "\u{3000}k", "k\u{2003}", "k\u{85}"] {
            let map = headers(&[("x-client-id", odd.as_bytes())]);
            assert_eq!(header_key(&map, &name).unwrap(), odd);
            let bearer = format!("Bearer {odd}");
            let map = headers(&[("authorization", bearer.as_bytes())]);
            assert_eq!(api_key(&map).unwrap(), odd);
            // The same key in both headers is one key, not two.
            let both = headers(&[
                ("authorization", bearer.as_bytes()),
                ("x-api-key", odd.as_bytes()),
            ]);
            assert_eq!(api_key(&both).unwrap(), odd);
        }
        let tabbed = headers(&[("x-client-id", b"\t alice \t")]);
        assert_eq!(header_key(&tabbed, &name).unwrap(), "alice");
    }

    #[test]
    fn a_key_header_given_twice_names_no_client() {
        let name = HeaderName::from_static("x-client-id");
        let twice = headers(&[("x-client-id", b"alice"), ("x-client-id", b"bob")]);
        assert_eq!(
            header_key(&twice, &name),
            Err(KeyError::Repeated(name.clone()))
        );
        let api_twice = headers(&[("x-api-key", b"k1"), ("x-api-key", b"k2")]);
        assert_eq!(api_key(&api_twice), Err(KeyError::Repeated(X_API_KEY)));
        let bearer_twice = headers(&[
            ("authorization", b"Bearer tok1"),
            ("authorization", b"Bearer tok2"),
        ]);
        assert_eq!(
            api_key(&bearer_twice),
            Err(KeyError::Repeated(AUTHORIZATION))
        );
        // A bearer token is a client id like any other: capped alike.
        let long = format!("Bearer {}", "t".repeat(tollgate::MAX_CLIENT_BYTES + 1));
        assert_eq!(
            api_key(&headers(&[("authorization", long.as_bytes())])),
            Err(KeyError::TooLong {
                name: AUTHORIZATION,
                bytes: tollgate::MAX_CLIENT_BYTES + 1
            })
        );
        assert!(KeyError::Repeated(name)
            .to_string()
            .contains("x-client-id header is given more than once"));
    }

    #[test]
    fn api_key_prefers_bearer_then_x_api_key() {
        let key = |pairs: &[(&'static str, &[u8])]| api_key(&headers(pairs));
        let both = key(&[("authorization", b"bearer tok "), ("x-api-key", b"tok")]);
        assert_eq!(both.unwrap(), "tok");
        // Two different keys: which one the API checks is not known here,
        // and charging the other would let a client pick its own limit.
        let two = key(&[("authorization", b"bearer tok"), ("x-api-key", b"k")]);
        assert_eq!(two, Err(KeyError::TwoApiKeys));
        // A bearer token that is not UTF-8 says so, not "must be Bearer".
        let latin1 = key(&[("authorization", b"Bearer k\xff")]);
        assert_eq!(latin1, Err(KeyError::NotUtf8(AUTHORIZATION)));
        assert!(!KeyError::TwoApiKeys.is_absent());
        // An X-Api-Key given twice beside a bearer token names no one key
        // either; a blank one is no key at all.
        let repeated = key(&[
            ("authorization", b"Bearer tok"),
            ("x-api-key", b"tok"),
            ("x-api-key", b"zzz"),
        ]);
        assert_eq!(repeated, Err(KeyError::Repeated(X_API_KEY)));
        let blank = key(&[("authorization", b"Bearer tok"), ("x-api-key", b" ")]);
        assert_eq!(blank.unwrap(), "tok");
        let basic = key(&[("authorization", b"Basic abc"), ("x-api-key", b"k")]);
        assert_eq!(basic.unwrap(), "k");
        assert_eq!(
            key(&[("authorization", b"Bearer  ")]),
            Err(KeyError::NotBearer)
        );
        assert_eq!(
            key(&[("authorization", b"Basic abc")]),
            Err(KeyError::NotBearer)
        );
        assert_eq!(key(&[]), Err(KeyError::MissingApiKey));
        assert_eq!(
            key(&[("x-api-key", b" ")]),
            Err(KeyError::EmptyHeader(X_API_KEY))
        );
    }
}
