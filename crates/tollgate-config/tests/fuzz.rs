//! Arbitrary text into the config parser: never a panic, always either a
//! valid config or a clear error at a line and column.

use proptest::prelude::*;
use tollgate_config::{Config, Error};

const EXAMPLE: &str = include_str!("../../../examples/tollgate.toml");

fn check_config(text: &str) {
    match Config::parse(text) {
        Ok(config) => assert!(!config.plans().is_empty()),
        Err(Error::InvalidConfig {
            line,
            column,
            message,
            ..
        }) => {
            assert!(
                line >= 1 && line <= text.lines().count().max(1) + 1,
                "line {line}"
            );
            assert!(column >= 1);
            assert!(!message.trim().is_empty());
        }
        Err(other) => panic!("unexpected error kind {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn config_parser_never_panics_on_arbitrary_text(text in any::<String>()) {
        check_config(&text);
    }

    #[test]
    fn config_parser_never_panics_on_toml_like_text(
        text in r#"(\[\[plans\.[a-z]{1,3}\]\]\n|name = "[a-z0-9]{0,3}"\n|policy = "(gcra|token-bucket|sliding-window|x)"\n|limit = -?[0-9]{1,11}\n|window = ("[0-9]{0,4}(ms|s|m|h|d|w)?"|[0-9]{1,21})\n|shadow = (true|1)\n|default_plan = "[a-z]{1,3}"\n|\[clients\]\n|[a-z]{1,3} = "[a-z]{1,3}"\n|\[store\]\n|url = "[a-z:/0-9.]{0,12}"\n|\[auth\]\n|header = "[ -~]{0,5}"\n){0,12}"#
    ) {
        check_config(&text);
    }

    #[test]
    fn mangled_example_configs_never_panic(cut in 0usize..EXAMPLE.len(), junk in "[ -~\n]{0,8}") {
        let mut text = EXAMPLE.as_bytes()[..cut].to_vec();
        text.extend_from_slice(junk.as_bytes());
        text.extend_from_slice(&EXAMPLE.as_bytes()[cut..]);
        if let Ok(text) = String::from_utf8(text) {
            check_config(&text);
        }
    }
}
