//! A Redis URL that is refused never shows its password: not in the error
//! of a flag, not in the message of a config error, not in the line it
//! quotes from the file (`tollgate check`, a refused reload).

use tollgate_config::{check_redis_url, Config, Overrides};

const LIMIT: &str =
    "[[plans.default]]\nname = \"s\"\npolicy = \"sliding-window\"\nlimit = 1\nwindow = \"1s\"\n";

/// Invalid URLs, each with the password `s3cret` somewhere a user might
/// have meant one.
const INVALID: [&str; 10] = [
    "redis://alice:s3cret@127.0.0.1:notaport",
    "http://alice:s3cret@127.0.0.1:6379",
    "redis://alice:s3cret @127.0.0.1",
    "redis://alice:s3cret@",
    "redis://alice:s3cret@127.0.0.1:6379?db=1 ",
    "redis://alice:s3/cret@127.0.0.1",
    "redis://alice:s3cret@h:1\u{0}",
    "alice:s3cret@127.0.0.1",
    "redis:alice:s3cret@127.0.0.1",
    "unix://?pass=s3cret&db=1 ",
];

#[test]
fn the_error_of_an_invalid_url_never_shows_its_password() {
    for url in INVALID {
        let error = check_redis_url(url).expect_err(url);
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains("s3cret"), "{url}: {shown}");
            assert!(shown.contains("***"), "{url}: {shown}");
        }
    }
}

#[test]
fn a_config_error_at_a_url_never_shows_its_password() {
    let long = format!("redis://alice:s3cret@{}:notaport", "h".repeat(200));
    for url in INVALID.iter().copied().chain([long.as_str()]) {
        let quoted = format!("{url:?}");
        for store in [format!("url = {quoted}"), format!("cluster = [{quoted}]")] {
            let text = format!("[store]\n{store}\n{LIMIT}");
            let error = Config::parse(&text).expect_err(&text).to_string();
            assert!(!error.contains("s3cret"), "{error}");
            assert!(error.contains("line 2"), "{error}");
        }
    }
    // A cluster given as a string, not a list: the parser's own message
    // quotes the value.
    let text = format!("[store]\ncluster = \"redis://alice:s3cret@h:7000\"\n{LIMIT}");
    let error = Config::parse(&text).expect_err("a string").to_string();
    assert!(!error.contains("s3cret"), "{error}");
}

#[test]
fn the_caret_still_points_at_the_url_after_masking() {
    let text = format!("[store]\nurl = \"redis://alice:s3cret@h:x\"\n{LIMIT}");
    let error = Config::parse(&text).expect_err("a bad port").to_string();
    assert!(error.contains("line 2, column 7"), "{error}");
    assert!(
        error.ends_with("2 | url = \"redis://alice:***@h:x\"\n          ^"),
        "{error}"
    );
}

#[test]
fn a_comma_in_a_cluster_flags_password_shows_no_part_of_it() {
    // `--redis-cluster` splits its value at commas, so a raw comma in a
    // password cuts the URL in two: neither half may be shown.
    let overrides = Overrides {
        redis_cluster: vec!["redis://dan:xyzzy".to_owned(), "plugh@h:7000".to_owned()],
        ..Overrides::default()
    };
    let error = Config::parse_with(LIMIT, &overrides)
        .expect_err("half a URL")
        .to_string();
    assert!(!error.contains("xyzzy"), "{error}");
    assert!(!error.contains("plugh"), "{error}");
    assert!(error.contains("%2C"), "{error}");
}

/// A refused URL's message names what is wrong with it, never the port
/// when the port is fine, and never shows the password.
#[test]
fn the_error_of_an_invalid_url_names_its_problem() {
    for (url, problem) in [
        (
            "redis://u:s3cret@127.0.0.1:27004?db=2",
            "the database goes in the path (redis://host:port/2)",
        ),
        ("redis://u:s3cret@:27004", "the host is missing"),
        (
            "redis://u:s3?cret@127.0.0.1:27004",
            "contains '?': percent-encode it as %3F",
        ),
        (
            "redis://u:s3#cret@127.0.0.1:27004",
            "contains '#': percent-encode it as %23",
        ),
        (
            "redis://u:s3/cret@127.0.0.1:27004",
            "contains '/': percent-encode it as %2F",
        ),
        (
            "redis://u:s3%ZZcret@127.0.0.1:27004",
            "an invalid percent escape",
        ),
        (
            "redis://u:s3cret%2@127.0.0.1:27004",
            "an invalid percent escape",
        ),
    ] {
        let error = check_redis_url(url).expect_err(url).to_string();
        assert!(error.contains(problem), "{url}: {error}");
        assert!(!error.contains("cret"), "{url}: {error}");
    }
    for url in [
        "redis://u:s3%3Fcret@127.0.0.1:27004/2",
        "redis://h:1/0?protocol=resp3",
    ] {
        assert!(check_redis_url(url).is_ok(), "{url}");
    }
}
