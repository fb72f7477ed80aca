//! `[connections]`: the three limits, their defaults, and their bounds as
//! errors with a line and column.

use std::time::Duration;

use tollgate_config::{Config, Error};

const LIMIT: &str =
    "[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 10\nwindow = \"1s\"\n";

fn with_connections(section: &str) -> String {
    format!("default_plan = \"free\"\n{LIMIT}[connections]\n{section}")
}

/// The (line, column, message) of the error for `text`.
fn mistake(text: &str) -> (usize, usize, String) {
    match Config::parse(text) {
        Err(Error::InvalidConfig {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a config error for {text:?}, got {other:?}"),
    }
}

#[test]
fn defaults_apply_when_the_section_is_absent() {
    let config = Config::parse(&with_connections("")).unwrap();
    assert_eq!(
        config.connections.header_read_timeout,
        Duration::from_secs(10)
    );
    assert_eq!(config.connections.idle_timeout, Duration::from_secs(60));
    assert_eq!(config.connections.max_connections, 10_000);
    assert!(config.summary().contains(
        "connections: header-read timeout 10s, idle timeout 1m, at most 10000 open per listen address"
    ));
}

#[test]
fn the_three_limits_are_read_with_the_config_duration_syntax() {
    let text = with_connections(
        "header_read_timeout = \"300ms\"\nidle_timeout = \"2h\"\nmax_connections = 64\n",
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(
        config.connections.header_read_timeout,
        Duration::from_millis(300)
    );
    assert_eq!(config.connections.idle_timeout, Duration::from_secs(7_200));
    assert_eq!(config.connections.max_connections, 64);
    let bare_ms = Config::parse(&with_connections("idle_timeout = 250\n")).unwrap();
    assert_eq!(bare_ms.connections.idle_timeout, Duration::from_millis(250));
}

#[test]
fn out_of_bounds_limits_are_refused_at_their_line_and_column() {
    let cases = [
        (
            "header_read_timeout = \"99ms\"\n",
            "header_read_timeout must be between 100ms and 10m (got 99ms)",
        ),
        (
            "header_read_timeout = \"11m\"\n",
            "header_read_timeout must be between 100ms and 10m (got 11m)",
        ),
        (
            "idle_timeout = \"2d\"\n",
            "idle_timeout must be between 100ms and 1d (got 2d)",
        ),
        (
            "idle_timeout = 0\n",
            "idle_timeout must be between 100ms and 1d (got 0ms)",
        ),
        (
            "max_connections = 0\n",
            "max_connections must be between 1 and 1000000 (got 0)",
        ),
        (
            "max_connections = 1000001\n",
            "max_connections must be between 1 and 1000000 (got 1000001)",
        ),
    ];
    let section_line = with_connections("").lines().count() + 1;
    for (section, expected) in cases {
        let (line, column, message) = mistake(&with_connections(section));
        assert_eq!(line, section_line, "{section}");
        assert!(column > 1, "{section}: column {column}");
        assert_eq!(message, format!("[connections] {expected}"), "{section}");
    }
}

#[test]
fn unknown_keys_and_wrong_types_are_refused() {
    let (_, _, message) = mistake(&with_connections("max_connection = 5\n"));
    assert!(
        message.contains("unknown field `max_connection`"),
        "{message}"
    );
    let (_, _, message) = mistake(&with_connections("max_connections = -1\n"));
    assert!(!message.is_empty());
    let (_, _, message) = mistake(&with_connections("idle_timeout = \"soon\"\n"));
    assert!(message.contains("invalid duration"), "{message}");
}
