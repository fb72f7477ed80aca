//! Arbitrary bytes into the request decoder: never a panic, always either a
//! valid request or a clear error.

use proptest::prelude::*;
use tollgate_server::http::{decode_check, MAX_CLIENT_BYTES};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn request_decoder_never_panics_on_arbitrary_bytes(body in proptest::collection::vec(any::<u8>(), 0..300)) {
        match decode_check(&body, 1_000) {
            Ok(request) => {
                prop_assert!(!request.client.is_empty() && request.client.len() <= MAX_CLIENT_BYTES);
                prop_assert!((1..=1_000).contains(&request.cost));
            }
            Err(rejection) => {
                prop_assert_eq!(rejection.status.as_u16(), 400);
                prop_assert!(!rejection.message.is_empty());
            }
        }
    }

    #[test]
    fn request_decoder_never_panics_on_json_like_bodies(
        body in r#"\{( ?"(client|cost|plan|x)" ?: ?("[^"\\]{0,300}"|-?[0-9]{1,25}(\.[0-9])?|null|true|\[\]|\{\}) ?,?){0,4}\}?"#
    ) {
        match decode_check(body.as_bytes(), 1_000) {
            Ok(request) => {
                prop_assert!(!request.client.is_empty() && request.client.len() <= MAX_CLIENT_BYTES);
                prop_assert!((1..=1_000).contains(&request.cost));
            }
            Err(rejection) => prop_assert!(!rejection.message.is_empty()),
        }
    }
}
