//! `tollgate proxy`'s connection limits: the flags, the `--config` file's
//! `[connections]`, and which one wins.

use std::time::Duration;

use clap::Parser;
use tollgate_cli::proxy::ProxyArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    proxy: ProxyArgs,
}

const PLAN: &str = "default_plan = \"free\"\n[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 5\nwindow = \"1s\"\n";

fn parse(args: &[&str]) -> Result<tollgate_proxy::ProxyConfig, String> {
    let all = ["proxy", "--upstream", "http://127.0.0.1:3000"];
    let cli = Cli::try_parse_from(all.iter().chain(args)).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(cli.proxy.config())
        .map_err(|e| e.to_string())
}

#[test]
fn without_flags_or_file_the_defaults_apply() {
    let limits = parse(&[]).unwrap().connections();
    assert_eq!(limits, tollgate_connections::Limits::default());
}

#[test]
fn flags_set_the_limits_and_out_of_bounds_values_name_the_flag() {
    let limits = parse(&[
        "--header-read-timeout",
        "2s",
        "--idle-timeout",
        "5m",
        "--max-connections",
        "100",
    ])
    .unwrap()
    .connections();
    assert_eq!(limits.header_read_timeout, Duration::from_secs(2));
    assert_eq!(limits.idle_timeout, Duration::from_secs(300));
    assert_eq!(limits.max_connections, 100);
    let error = parse(&["--max-connections", "2000000"]).unwrap_err();
    assert!(
        error.contains("invalid --max-connections: max_connections must be between 1 and 1000000"),
        "{error}"
    );
    let error = parse(&["--header-read-timeout", "20m"]).unwrap_err();
    assert!(error.contains("invalid --header-read-timeout"), "{error}");
}

#[test]
fn the_config_file_sets_them_and_a_flag_replaces_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let text = format!("{PLAN}[connections]\nheader_read_timeout = \"3s\"\nmax_connections = 7\n");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let limits = parse(&["--config", path]).unwrap().connections();
    assert_eq!(limits.header_read_timeout, Duration::from_secs(3));
    assert_eq!(limits.idle_timeout, Duration::from_secs(60));
    assert_eq!(limits.max_connections, 7);
    let limits = parse(&["--config", path, "--max-connections", "9"])
        .unwrap()
        .connections();
    assert_eq!(limits.header_read_timeout, Duration::from_secs(3));
    assert_eq!(limits.max_connections, 9);
}

#[test]
fn a_config_file_out_of_bounds_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        format!("{PLAN}[connections]\nidle_timeout = \"50ms\"\n"),
    )
    .unwrap();
    let error = parse(&["--config", path.to_str().unwrap()]).unwrap_err();
    assert!(error.contains("line 8"), "{error}");
    assert!(
        error.contains("[connections] idle_timeout must be between 100ms and 1d (got 50ms)"),
        "{error}"
    );
}
