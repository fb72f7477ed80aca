//! The real `tollgate proxy --config FILE` binary in front of a real
//! upstream reloads its plans on SIGHUP: a changed limit starts afresh, an
//! unchanged one keeps every client's count, and a broken file is refused
//! with a log line while the running plans stay. Waits are bounded loops on
//! real events (a line printed, an answer changed), never sleeps standing in
//! for a clock.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tollgate_testkit::process::{ChildGuard, Log};
use tollgate_testkit::{counting_upstream, get_status};

mod proxy_common;
use proxy_common::read_banner;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// `free`: `free_limit` a day; `paid` (client `acme`): 5 a day.
fn config(free_limit: u32) -> String {
    format!(
        r#"
default_plan = "free"

[clients]
acme = "paid"

[[plans.free]]
name = "1d"
policy = "sliding-window"
limit = {free_limit}
window = "1d"

[[plans.paid]]
name = "1d"
policy = "sliding-window"
limit = 5
window = "1d"
"#
    )
}

fn write(path: &Path, text: &str) {
    // Write then rename, as editors and config managers do.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A running proxy, stopped by its PID when dropped if a test fails
/// before [`Proxy::stop`].
struct Proxy {
    child: ChildGuard,
    addr: SocketAddr,
    /// Its standard error, read as it comes.
    log: Log,
}

impl Proxy {
    fn start(upstream: &str, config: &Path) -> Self {
        Self::start_with(upstream, &["--config".as_ref(), config.as_os_str()])
    }

    /// The proxy with `args` besides the upstream, the listen address and
    /// the key.
    fn start_with(upstream: &str, args: &[&std::ffi::OsStr]) -> Self {
        let mut child = ChildGuard::spawn(
            Command::new(BIN)
                .args(["proxy", "--upstream", upstream, "--listen", "127.0.0.1:0"])
                .args(["--key", "header:X-Client-Id"])
                .args(args)
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .unwrap();
        let (_, addr) = read_banner(&mut child);
        let log = Log::read(child.stderr.take().unwrap());
        Self { child, addr, log }
    }

    /// `GET /` for `client` on a fresh connection: the status code.
    fn get(&self, client: &str) -> u16 {
        get_status(self.addr, "/", &[("x-client-id", client)])
    }

    /// How many of `n` requests of `client` are allowed (the others must
    /// be 429).
    fn allowed(&self, client: &str, n: usize) -> usize {
        (0..n)
            .filter(|_| match self.get(client) {
                200 => true,
                429 => false,
                other => panic!("unexpected status {other}"),
            })
            .count()
    }

    fn signal(&self, name: &str) {
        self.child.signal(name);
    }

    /// SIGTERM; whether the proxy exited cleanly.
    fn stop(mut self) -> bool {
        self.signal("TERM");
        self.child.wait().unwrap().success()
    }
}

#[test]
fn proxy_reloads_its_plans_on_sighup_keeping_unchanged_limits() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (upstream, seen) = runtime.block_on(counting_upstream());
    let upstream = format!("http://{upstream}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    write(&path, &config(2));
    let proxy = Proxy::start(&upstream, &path);

    assert_eq!(proxy.allowed("bob", 3), 2, "free: 2 a day");
    assert_eq!(proxy.allowed("acme", 1), 1, "paid: 1 of 5 used");

    // free becomes 4 a day: a changed limit, so bob starts afresh; paid is
    // unchanged, so acme keeps its count.
    write(&path, &config(4));
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(15);
    while proxy.get("bob") != 200 {
        assert!(Instant::now() < deadline, "the reload never took effect");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(proxy.allowed("bob", 4), 3, "the 4th of the new plan");
    assert_eq!(proxy.allowed("acme", 5), 4, "paid kept its count");
    proxy.log.wait_for("plans reloaded");

    // A changed sweep interval is put in force by a restart only, and
    // says so.
    write(&path, &format!("sweep_interval = \"2s\"\n{}", config(4)));
    proxy.signal("HUP");
    proxy
        .log
        .wait_for("the changed sweep_interval waits for a restart");

    // A broken file is refused; the running plans stay.
    write(&path, "default_plan = \"gold\"\n");
    proxy.signal("HUP");
    proxy.log.wait_for("config reload refused");
    assert_eq!(proxy.allowed("carol", 5), 4, "still free at 4 a day");

    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    // 2 + 1 before the reload, 1 + 3 + 4 after it, 4 after the broken file.
    assert_eq!(seen.load(Ordering::SeqCst), 15);
}

/// A `[connections]` key that a flag replaces is the flag's after a restart
/// too: the file changing it waits for nothing (audit: the proxy logged
/// that it waited for a restart); a key no flag replaces does wait.
#[test]
fn a_connections_key_a_flag_replaces_does_not_wait_for_a_restart() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (upstream, _seen) = runtime.block_on(counting_upstream());
    let upstream = format!("http://{upstream}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let with_connections = |idle: &str, header_read: &str| {
        let connections = format!(
            "[connections]\nidle_timeout = \"{idle}\"\nheader_read_timeout = \"{header_read}\"\n"
        );
        // The plans' tables come after [connections]'s keys end.
        format!("{}\n{connections}", config(2))
    };
    write(&path, &with_connections("60s", "10s"));
    let args = [
        "--config".as_ref(),
        path.as_os_str(),
        "--idle-timeout".as_ref(),
        "5s".as_ref(),
    ];
    let proxy = Proxy::start_with(&upstream, &args);

    write(&path, &with_connections("30s", "10s"));
    proxy.signal("HUP");
    proxy.log.wait_for("plans reloaded");
    assert!(
        !proxy.log.so_far().contains("waits for a restart"),
        "{}",
        proxy.log.so_far()
    );

    write(&path, &with_connections("30s", "5s"));
    proxy.signal("HUP");
    proxy
        .log
        .wait_for("the changed [connections] waits for a restart");
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
}

/// Without `--config` a SIGHUP has nothing to reload: the proxy logs it and
/// goes on (it was ended by the signal's default action, audit), and its
/// clients keep their counts.
#[test]
fn a_proxy_without_a_config_goes_on_after_a_sighup() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (upstream, seen) = runtime.block_on(counting_upstream());
    let upstream = format!("http://{upstream}");
    let proxy = Proxy::start_with(
        &upstream,
        &["--limit", "2", "--window", "1d"].map(std::ffi::OsStr::new),
    );
    assert_eq!(proxy.allowed("bob", 1), 1);
    proxy.signal("HUP");
    proxy.log.wait_for("SIGHUP: no --config to reload");
    assert_eq!(proxy.allowed("bob", 2), 1, "bob kept his count");
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

/// A `[store]` change waits for a restart, so a reload's limits go into
/// force on the store the proxy runs: a limit its Redis store could not
/// serve exactly is refused, even when the file now names the memory
/// store (which could), instead of every decision under it failing and
/// passing under `fail-open`.
#[test]
fn proxy_refuses_a_reload_whose_limits_its_running_redis_could_not_serve() {
    let Some(redis) = tollgate_redis::testing::RedisServer::spawn("proxy_reload_running_store")
    else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (upstream, seen) = runtime.block_on(counting_upstream());
    let upstream = format!("http://{upstream}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let on_redis = format!("{}\n[store]\nurl = \"{}\"\n", config(2), redis.url());
    write(&path, &on_redis);
    let proxy = Proxy::start(&upstream, &path);
    assert_eq!(proxy.allowed("bob", 1), 1, "free: 1 of 2 used");

    let to_memory = format!(
        "{}\n[store]\nurl = \"memory\"\n",
        config(2).replace("window = \"1d\"", "window = \"100000000000d\"")
    );
    write(&path, &to_memory);
    proxy.signal("HUP");
    proxy.log.wait_for("config reload refused");
    proxy.log.wait_for("the running redis store");
    // The running plans stay, on Redis: bob has one request left.
    assert_eq!(proxy.allowed("bob", 3), 1, "still 2 a day, on Redis");

    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
