//! What the config tests share: the error a text gets, and a plan of one limit.

use tollgate_config::{Config, Error, Overrides};

/// The (line, column, message) of the error for `text`.
pub fn mistake(text: &str) -> (usize, usize, String) {
    mistake_with(text, &Overrides::default())
}

/// The (line, column, message) of the error for `text` with `flags`.
pub fn mistake_with(text: &str, flags: &Overrides) -> (usize, usize, String) {
    match Config::parse_with(text, flags) {
        Err(Error::InvalidConfig {
            line,
            column,
            message,
            snippet,
            ..
        }) => {
            assert!(snippet.starts_with(&format!("{line} | ")), "{snippet}");
            assert!(snippet.ends_with('^'), "{snippet}");
            (line, column, message)
        }
        other => panic!("expected a config error for {text:?}, got {other:?}"),
    }
}

pub const LIMIT: &str =
    "[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 10\nwindow = \"1s\"\n";
