//! `parse_line` over arbitrary input never panics, and its errors say something.

use proptest::prelude::*;
use tollgate_cli::replay::{parse_line, Call};

/// Lines that look almost right: real verbs and policies, odd numbers and spacing.
fn plausible_line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        Just("new".to_owned()),
        Just("allow".to_owned()),
        Just("remaining".to_owned()),
        Just("#".to_owned()),
        Just("token-bucket".to_owned()),
        Just("sliding-window".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("4294967296".to_owned()),
        "[0-9]{1,22}",
        "\\PC{0,8}",
    ];
    (proptest::collection::vec(word, 0..6), "[ \t\r]{1,3}")
        .prop_map(|(words, sep)| words.join(&sep))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(line in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Err(message) = parse_line(&line) {
            prop_assert!(!message.trim().is_empty());
            prop_assert!(!message.contains('\n'), "one output line per input line: {:?}", message);
        }
    }

    #[test]
    fn plausible_lines_never_panic(line in plausible_line()) {
        match parse_line(line.as_bytes()) {
            Err(message) => {
                prop_assert!(!message.trim().is_empty());
                prop_assert!(!message.contains('\n'));
            }
            Ok(Some(Call::New { policy, .. })) => prop_assert!(!policy.is_empty()),
            Ok(Some(Call::Allow { client, .. } | Call::Remaining { client, .. })) => {
                prop_assert!(!client.is_empty());
            }
            Ok(None) => {
                let first = line.split_ascii_whitespace().next();
                prop_assert!(first.is_none_or(|w| w.starts_with('#')));
            }
        }
    }

    #[test]
    fn well_formed_calls_parse_back(client in "[a-zA-Z0-9_.:-]{1,20}", now in any::<u64>(), limit in any::<u32>(), window in any::<u64>()) {
        let allow = format!("allow {client} {now}");
        prop_assert_eq!(
            parse_line(allow.as_bytes()),
            Ok(Some(Call::Allow { client: &client, now_ms: now }))
        );
        let remaining = format!("  remaining\t{client}  {now}\r\n");
        prop_assert_eq!(
            parse_line(remaining.as_bytes()),
            Ok(Some(Call::Remaining { client: &client, now_ms: now }))
        );
        let new = format!("new gcra {limit} {window}");
        prop_assert_eq!(
            parse_line(new.as_bytes()),
            Ok(Some(Call::New { policy: "gcra", limit, window_ms: window }))
        );
    }
}

/// A comment is nothing to decide, whatever its bytes: a session's notes
/// in Latin-1 are no error.
#[test]
fn a_comment_that_is_not_utf8_is_still_a_comment() {
    for line in [&b"# caf\xe9"[..], b"  #\xff\xfe", b"\t# ok \x80"] {
        assert_eq!(parse_line(line).map(|call| call.is_none()), Ok(true));
    }
    assert!(parse_line(b"allow caf\xe9 1").is_err());
}
