//! Config checking: every mistake is reported at its line and column.

mod common;

use common::{mistake, mistake_with, LIMIT};
use tollgate_config::{ClientIdSource, Config, Error, FailurePolicy, Overrides, StoreKind};

const GOOD: &str = include_str!("../../../examples/tollgate.toml");

#[test]
fn the_example_config_is_valid() {
    let config = Config::parse(GOOD).unwrap();
    assert_eq!(config.default_plan().name(), "free");
    assert_eq!(config.plans().len(), 2);
    assert_eq!(
        config.plans()[config.plan_index_for("acme-corp")].name(),
        "paid"
    );
    assert_eq!(
        config.plans()[config.plan_index_for("someone")].name(),
        "free"
    );
    assert_eq!(config.max_cost, 1000);
    assert_eq!(config.store.kind, StoreKind::Memory);
    assert_eq!(config.store.failure_policy, FailurePolicy::FailOpen);
    assert!(matches!(&config.client_id, ClientIdSource::Header(h) if h == "x-client-id"));
    let paid = &config.plans()[config.plan_index("paid").unwrap()];
    let burst = &paid.limits()[2];
    assert!(burst.is_shadow());
    assert_eq!(tollgate::Policy::window_ms(burst.policy()), 200);
    assert!(config.summary().contains("\"1d\" token-bucket 1000 per 1d"));
}

/// With API keys as client ids (any caller picks its own), an Envoy rule
/// on the default plan lets a caller spend an Envoy client's quota by
/// sending its id as a key (an audit): the summary, which `tollgate check`
/// and the start-up banner print, warns of it, and only then.
#[test]
fn envoy_rules_on_the_plan_of_unchecked_api_keys_are_warned_of() {
    let api_keys = GOOD
        .replace("header = \"X-Client-Id\"", "")
        .replace("# api_key = true", "api_key = true");
    let warned = |text: &str| Config::parse(text).unwrap().summary().contains("warning:");
    assert!(
        warned(&api_keys),
        "the example's remote_address rule is on \"free\""
    );
    assert!(
        !warned(GOOD),
        "a header set by a gateway is no caller's choice"
    );
    let own_plan = api_keys.replace(
        "descriptor = [{ key = \"remote_address\" }]\nplan = \"free\"",
        "descriptor = [{ key = \"remote_address\" }]\nplan = \"paid\"",
    );
    assert_ne!(own_plan, api_keys);
    assert!(!warned(&own_plan), "no Envoy rule on the default plan");
    let grpc_off = api_keys.replace("grpc_listen = \"127.0.0.1:8081\"", "grpc_listen = \"off\"");
    assert_ne!(grpc_off, api_keys);
    assert!(!warned(&grpc_off), "no Envoy service");
}

#[test]
fn windows_in_every_unit() {
    for (window, ms) in [
        ("\"250ms\"", 250),
        ("\"15m\"", 900_000),
        ("\"2h\"", 7_200_000),
        ("\"1d\"", 86_400_000),
        ("5000", 5_000),
    ] {
        let text = LIMIT.replace("window = \"1s\"", &format!("window = {window}"));
        let config = Config::parse(&text).unwrap();
        assert_eq!(
            tollgate::Policy::window_ms(config.plans()[0].limits()[0].policy()),
            ms
        );
    }
}

#[test]
fn syntax_errors_point_at_their_line() {
    let (line, _, message) = mistake(&format!("{LIMIT}name = \"unterminated\n"));
    assert_eq!(line, 6);
    assert!(!message.is_empty());
    let (line, _, _) = mistake("default_plan = \n");
    assert_eq!(line, 1);
}

#[test]
fn semantic_errors_point_at_the_offending_value() {
    let cases: &[(&str, usize, usize, &str)] = &[
        (
            &LIMIT.replace("sliding-window", "leaky"),
            3,
            10,
            "unknown policy \"leaky\": known policies are sliding-window, token-bucket, gcra",
        ),
        (
            &LIMIT.replace("limit = 10", "limit = 0"),
            4,
            9,
            "limit must be at least 1",
        ),
        (
            &LIMIT.replace("limit = 10", "limit = -3"),
            4,
            9,
            "limit: invalid value: integer `-3`, expected a whole number, not negative",
        ),
        (
            &LIMIT.replace("limit = 10", "limit = 1.5"),
            4,
            9,
            "limit: invalid type: floating point `1.5`, expected a whole number, not negative",
        ),
        (
            &LIMIT.replace("limit = 10", "limit = 99999999999999999999"),
            4,
            9,
            "limit: invalid type: integer `99999999999999999999`, too large, expected a whole \
             number, not negative",
        ),
        (
            &LIMIT.replace("window = \"1s\"", "window = \"1 week\""),
            5,
            10,
            "invalid duration",
        ),
        (
            &LIMIT.replace("window = \"1s\"", "window = 0"),
            5,
            10,
            "window must be at least 1 ms",
        ),
        (
            &LIMIT
                .replace("sliding-window", "token-bucket")
                .replace("limit = 10", "limit = 7"),
            5,
            10,
            "multiple of the limit",
        ),
        (
            &LIMIT.replace("name = \"1s\"\n", ""),
            1,
            1,
            "missing field `name`",
        ),
        (
            &LIMIT.replace("limit = 10", "limt = 10"),
            4,
            1,
            "unknown field `limt`",
        ),
        (
            &format!("default_plan = \"gold\"\n{LIMIT}"),
            1,
            16,
            "default_plan refers to unknown plan \"gold\": defined plans are free",
        ),
        (
            &format!("{LIMIT}[clients]\nbob = \"gold\"\n"),
            7,
            7,
            "client \"bob\" refers to unknown plan \"gold\"",
        ),
        (
            &format!("listen = [\"127.0.0.1:80\", \"localhost\"]\n{LIMIT}"),
            1,
            27,
            "invalid listen address \"localhost\"",
        ),
        (
            &format!("max_cost = 0\n{LIMIT}"),
            1,
            12,
            "max_cost must be between 1",
        ),
        (
            &format!("{LIMIT}[store]\nurl = \"http://redis\"\n"),
            7,
            7,
            "invalid redis URL",
        ),
        (
            &format!("{LIMIT}[store]\nfailure_policy = \"shrug\"\n"),
            7,
            18,
            "unknown failure_policy \"shrug\"",
        ),
        (
            &format!("{LIMIT}[store]\nmax_clients = 0\n"),
            7,
            15,
            "max_clients must be at least 1",
        ),
        (
            &format!("{LIMIT}[auth]\nheader = \"bad header\"\n"),
            7,
            10,
            "not a valid HTTP header name",
        ),
        (
            &format!("{LIMIT}[auth]\nheader = \"x-a\"\napi_key = true\n"),
            8,
            11,
            "not both",
        ),
        (
            &format!("{LIMIT}{LIMIT}"),
            7,
            8,
            "names the limit \"1s\" twice",
        ),
        (
            &format!("{LIMIT}[[plans.paid]]\n{}", &LIMIT[15..]),
            1,
            1,
            "default_plan is missing",
        ),
        ("# nothing\n", 1, 1, "no plans"),
        (
            "[plans.free]\nname = \"1s\"\n",
            1,
            1,
            "write each limit as [[plans.NAME]] (double brackets)",
        ),
        (
            &format!("{LIMIT}[clients]\n\"\" = \"free\"\n"),
            7,
            6,
            "client id \"\" in [clients] must be 1 to 256 bytes long",
        ),
        (
            &format!("sweep_interval = \"5ms\"\n{LIMIT}"),
            1,
            18,
            "sweep_interval must be at least 100ms",
        ),
        // Numbers past their key's type, in words, not Rust's ("expected u32").
        (
            &LIMIT.replace("limit = 10", "limit = 4294967296"),
            4,
            9,
            "plan \"free\", limit \"1s\": limit must be from 1 to 4294967295 (got 4294967296)",
        ),
        (
            &format!("{LIMIT}[store]\nbreaker_failures = -1\n"),
            7,
            20,
            "breaker_failures: invalid value: integer `-1`, expected a whole number, not negative",
        ),
    ];
    for (text, line, column, needle) in cases {
        let (l, c, message) = mistake(text);
        assert!(
            message.contains(needle),
            "{message:?} should contain {needle:?}"
        );
        assert_eq!(
            (l, c),
            (*line, *column),
            "position of {message:?} in\n{text}"
        );
    }
}

#[test]
fn the_grpc_port_is_off_with_off_in_the_file_or_the_flag() {
    let on = Config::parse(LIMIT).unwrap();
    assert_eq!(
        on.envoy.grpc_listen,
        Some(tollgate_config::DEFAULT_GRPC_LISTEN)
    );
    assert!(on
        .summary()
        .contains("gRPC (Envoy rate limit service): 127.0.0.1:8081"));
    let off = Config::parse(&format!("{LIMIT}[envoy]\ngrpc_listen = \"off\"\n")).unwrap();
    assert_eq!(off.envoy.grpc_listen, None);
    assert!(
        off.summary()
            .contains("gRPC (Envoy rate limit service): off,"),
        "{}",
        off.summary()
    );
    let (line, _, message) = mistake(&format!("{LIMIT}[envoy]\ngrpc_listen = \"of\"\n"));
    assert_eq!(line, 7);
    assert!(message.contains("or \"off\""), "{message}");

    let flag = |value: &str| Overrides {
        grpc_listen: Some(value.to_owned()),
        ..Overrides::default()
    };
    let off = Config::parse_with(LIMIT, &flag("off")).unwrap();
    assert_eq!(off.envoy.grpc_listen, None);
    let moved = Config::parse_with(
        &format!("{LIMIT}[envoy]\ngrpc_listen = \"off\"\n"),
        &flag("127.0.0.1:9"),
    )
    .unwrap();
    assert_eq!(
        moved.envoy.grpc_listen,
        Some("127.0.0.1:9".parse().unwrap())
    );
    let error = Config::parse_with(LIMIT, &flag("0ff")).err().unwrap();
    assert!(matches!(error, Error::InvalidGrpcListen { .. }), "{error}");
}

/// Two of serve's addresses on one socket pass no start-up: refused when
/// checked, at the address written second.
#[test]
fn every_address_serve_listens_on_is_its_own() {
    for (addresses, line) in [
        ("listen = [\"127.0.0.1:9000\", \"127.0.0.1:9000\"]\n", 1),
        (
            "listen = [\"127.0.0.1:9000\"]\n[envoy]\ngrpc_listen = \"127.0.0.1:9000\"\n",
            3,
        ),
        ("listen = [\"0.0.0.0:9000\", \"127.0.0.1:9000\"]\n", 1),
        ("listen = [\"127.0.0.1:9000\", \"[::]:9000\"]\n", 1),
    ] {
        let (at, _, message) = mistake(&format!("{addresses}{LIMIT}"));
        assert_eq!(at, line, "{message}");
        assert!(message.contains("must be its own"), "{message}");
    }
    for fine in [
        "listen = [\"127.0.0.1:9000\", \"127.0.0.2:9000\"]\n",
        "listen = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n",
        "listen = [\"[::1]:9000\", \"0.0.0.0:9000\"]\n",
        "listen = [\"127.0.0.1:9000\"]\n[envoy]\ngrpc_listen = \"127.0.0.1:9001\"\n",
    ] {
        assert!(Config::parse(&format!("{fine}{LIMIT}")).is_ok(), "{fine}");
    }
    // The default gRPC address, not written: the listen line is blamed, and
    // the message says where the other address comes from.
    let (at, _, message) = mistake(&format!("listen = [\"127.0.0.1:8081\"]\n{LIMIT}"));
    assert_eq!(at, 1, "{message}");
    assert!(
        message.contains("whose default it is; set [envoy] grpc_listen"),
        "{message}"
    );
    // A flag's address collides too, and no line of the file is blamed.
    let flags = Overrides {
        listen: vec!["127.0.0.1:8081".to_owned()],
        ..Overrides::default()
    };
    match Config::parse_with(LIMIT, &flags) {
        Err(Error::AddressesCollide { detail }) => {
            assert!(detail.contains("127.0.0.1:8081 is given twice"), "{detail}");
        }
        other => panic!("expected the default gRPC address to collide, got {other:?}"),
    }
}

/// A flag's address is named by its flag, not as a key's default (audit:
/// `--grpc-listen` colliding with the file's `listen` was said to be
/// `grpc_listen`'s default); serve without a config file checks its flags'
/// addresses too (audit: the system's "Address already in use" at start-up).
#[test]
fn colliding_addresses_are_named_by_the_flags_that_gave_them() {
    let grpc_flag = Overrides {
        grpc_listen: Some("127.0.0.1:9000".to_owned()),
        ..Overrides::default()
    };
    let (at, _, message) = mistake_with(
        &format!("listen = [\"127.0.0.1:9000\"]\n{LIMIT}"),
        &grpc_flag,
    );
    assert_eq!(at, 1, "{message}");
    assert!(
        message.contains("(listen, then --grpc-listen)"),
        "{message}"
    );
    let both = Overrides {
        listen: vec!["127.0.0.1:9000".to_owned()],
        ..grpc_flag
    };
    for config in [
        Config::parse_with(LIMIT, &both),
        Config::embedded_default_with(&both),
    ] {
        match config {
            Err(Error::AddressesCollide { detail }) => assert!(
                detail.contains("127.0.0.1:9000 is given twice (--listen, then --grpc-listen)"),
                "{detail}"
            ),
            other => panic!("expected the flags' addresses to collide, got {other:?}"),
        }
    }
    // Without a file, the default gRPC address's way out is its flag.
    let listen_flag = Overrides {
        listen: vec!["127.0.0.1:8081".to_owned()],
        ..Overrides::default()
    };
    match Config::embedded_default_with(&listen_flag) {
        Err(Error::AddressesCollide { detail }) => assert!(
            detail.contains("(--listen, then grpc_listen, whose default it is; give --grpc-listen another address, or off)"),
            "{detail}"
        ),
        other => panic!("expected the default gRPC address to collide, got {other:?}"),
    }
    assert!(Config::embedded_default_with(&Overrides::default()).is_ok());
}

#[test]
fn the_summary_gives_the_memory_stores_real_bound_on_clients() {
    // The memory store keeps two clients per shard at least: 128.
    for (max_clients, shown) in [
        (10, 128),
        (64, 128),
        (128, 128),
        (1_000, 1_000),
        (1_000_000, 1_000_000),
    ] {
        let config =
            Config::parse(&format!("[store]\nmax_clients = {max_clients}\n{LIMIT}")).unwrap();
        let expected = format!("memory (at most {shown} clients)");
        assert!(config.summary().contains(&expected), "{}", config.summary());
    }
}

#[test]
fn a_config_path_that_never_ends_is_refused_at_the_size_limit() {
    // A device has no length in its metadata; reading it must still stop.
    let error = Config::load(std::path::Path::new("/dev/zero")).expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("/dev/zero") && message.contains("1048576-byte limit"),
        "{message}"
    );
}

/// One format of durations (`tollgate::parse_duration`): a bare number is
/// milliseconds in a string too, as `tollgate proxy --window 250` reads it.
#[test]
fn a_duration_reads_the_same_in_the_file_as_on_the_command_line() {
    let text = "[[plans.p]]\nname = \"w\"\npolicy = \"gcra\"\nlimit = 5\nwindow = \"250\"\n";
    let config = Config::parse(text).unwrap();
    let window = tollgate::Policy::window_ms(config.plans()[0].limits()[0].policy());
    assert_eq!(window, 250);
}

/// A file that is not UTF-8 is refused with where it stops being UTF-8.
#[test]
fn a_file_that_is_not_utf8_is_refused_at_its_line_and_column() {
    let dir = std::env::temp_dir().join(format!("tollgate-not-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("latin1.toml");
    std::fs::write(&path, b"default_plan = \"free\"\n# caf\xe9\n").unwrap();
    let error = Config::load(&path).err().unwrap().to_string();
    assert!(
        error.contains("line 2, column 6: not valid UTF-8"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Plan and limit names reach HTTP headers (Envoy's `x-ratelimit-*` carry
/// them as they are) and terminals (`tollgate check`, `simulate`): a name
/// with a control character is refused, naming the plan, the limit and the
/// character.
#[test]
fn control_characters_in_plan_and_limit_names_are_refused_naming_them() {
    let plan = LIMIT.replace("[[plans.free]]", "[[plans.\"p\\r\\nSet-Cookie: a=b\"]]");
    let (line, _, message) = mistake(&plan);
    assert_eq!(line, 1, "{message}");
    assert!(
        message.contains(r#"plan "p\r\nSet-Cookie: a=b""#)
            && message.contains(r"'\r' (U+000D)")
            && message.contains("control character"),
        "{message}"
    );
    for (escaped, shown) in [
        ("\\u007F", r"'\u{7f}' (U+007F)"),
        ("\\n", r"'\n' (U+000A)"),
        ("\\t", r"'\t' (U+0009)"),
        ("\\u001B[2J", r"'\u{1b}' (U+001B)"),
        ("\\u0000", r"'\0' (U+0000)"),
        ("\\u009B", r"'\u{9b}' (U+009B)"),
    ] {
        let limit = LIMIT.replace("name = \"1s\"", &format!("name = \"1s{escaped}\""));
        let (line, column, message) = mistake(&limit);
        assert_eq!((line, column), (2, 8), "{message}");
        assert!(
            message.starts_with("plan \"free\", limit \"1s") && message.contains(shown),
            "{escaped}: {message}"
        );
    }
    // Printable names, quotes and non-ASCII letters included, are fine.
    let fine = LIMIT
        .replace("[[plans.free]]", "[[plans.\"gr\u{fc}n \\\"eco\\\"\"]]")
        .replace("name = \"1s\"", "name = \"1 s \u{e9}t\u{e9}\"");
    Config::parse(&fine).expect("printable names are valid");
}
