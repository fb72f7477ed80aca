//! Query strings whose percent-escapes are not UTF-8, refused before any
//! route reads them. axum's `Query` decodes such an escape as U+FFFD, so
//! `/v1/clients?client=caf%E9` named another client (`"caf\u{FFFD}"`, which
//! `caf%EF%BF%BD` names) and showed its state, where the path form
//! `/v1/clients/caf%E9` is refused.

use axum::extract::{Request, State};
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::Response;
use percent_encoding::percent_decode_str;

use super::{refuse, Rejection};
use crate::server::Server;

/// A layer of the router: refuses a request whose query has a parameter
/// that is not UTF-8 once decoded, naming it; passes every other one on.
pub(crate) async fn refuse_query_not_utf8(
    State(server): State<Server>,
    request: Request,
    next: Next,
) -> Response {
    match query_utf8(request.uri()) {
        Err(rejection) => refuse(&server, rejection),
        Ok(()) => next.run(request).await,
    }
}

/// [`check_utf8`] of `uri`'s query, if it has one: the router's layer, and
/// the routes answered before the router (`routes/hot.rs`).
pub(crate) fn query_utf8(uri: &Uri) -> Result<(), Rejection> {
    uri.query().map_or(Ok(()), check_utf8)
}

/// Each `name=value` of `query`, percent-decoded, must be UTF-8.
fn check_utf8(query: &str) -> Result<(), Rejection> {
    match query
        .split('&')
        .find(|pair| percent_decode_str(pair).decode_utf8().is_err())
    {
        None => Ok(()),
        Some(pair) => Err(Rejection::bad_request(format!(
            "invalid query string: {pair:?} is not UTF-8 once its percent-escapes are decoded \
             (write each character as the percent-escapes of its UTF-8 bytes, e.g. é as %C3%A9)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_escapes_that_decode_to_utf8_pass() {
        for good in [
            "client=caf%C3%A9",
            "client=caf%EF%BF%BD&plan=free",
            "a=%25",
            "",
            "x",
        ] {
            assert!(check_utf8(good).is_ok(), "{good}");
        }
        for bad in ["client=caf%E9", "plan=free&client=%FF", "%C3=1"] {
            let refused = check_utf8(bad).expect_err(bad);
            assert!(refused.message.contains("not UTF-8"), "{}", refused.message);
        }
    }
}
