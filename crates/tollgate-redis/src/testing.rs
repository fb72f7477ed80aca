//! Test support (feature `testing`): real `redis-server` processes on free
//! loopback ports, killed on drop.
//!
//! When `redis-server` is not installed, [`RedisServer::spawn`] returns
//! `None` after printing why, so the caller can skip; with the environment
//! variable `TOLLGATE_REQUIRE_REDIS=1` (set by CI) it panics instead, so a
//! missing Redis fails the suite rather than passing it silently.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::Duration;

mod cluster;
mod relay;
mod replica;
mod slot_move;
mod tls;

pub use crate::info::info_number;
pub use cluster::{client_slot, client_tag, ClusterOptions, RedisCluster};
pub use relay::Relay;
pub use slot_move::SlotMove;
pub use tls::TestCerts;

/// A runtime of two worker threads, as a server's: for tests whose tasks
/// must run side by side (load while a fault happens, a caller that gives
/// up while another waits).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A runtime of one thread: for tests that drive one caller at a time.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Whether the environment demands a real Redis (`TOLLGATE_REQUIRE_REDIS=1`).
pub fn redis_required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

/// Whether `redis-server` (and `redis-cli`) can be run here. When not, says
/// so on standard error, and panics if [`redis_required`].
///
/// # Panics
/// When Redis is missing and `TOLLGATE_REQUIRE_REDIS=1`.
pub fn redis_available(test: &str) -> bool {
    let runs = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("redis-server") && runs("redis-cli") {
        return true;
    }
    assert!(
        !redis_required(),
        "{test}: redis-server/redis-cli not found but TOLLGATE_REQUIRE_REDIS=1"
    );
    // Written to the stderr handle directly: the test harness captures
    // eprintln!, and a skip must show in the output of a passing run.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: redis-server/redis-cli not installed (set TOLLGATE_REQUIRE_REDIS=1 to fail instead)"
    );
    false
}

/// A port that was free a moment ago: bind 127.0.0.1:0, read it, release it.
///
/// # Panics
/// When no loopback port can be bound at all.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// Sends one inline command to 127.0.0.1:`port` and returns the raw reply
/// (up to 4 KiB), or `None` if Redis did not answer within 500 ms.
pub fn raw_command(port: u16, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream
        .set_write_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Polls `ready` up to `tries` times, 20 ms apart. Returns whether it succeeded.
pub fn wait_for(tries: u32, mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if ready() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    false
}

/// [`wait_for`] inside a runtime: polls `ready` up to `tries` times, 10 ms
/// apart, without blocking the runtime's thread. Returns whether it
/// succeeded.
pub async fn wait_until(tries: u32, mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Polls `store`'s call counts (every 5 ms, at most 5 s) until `done`
/// holds, and returns the last counts read: refunds are sent by a task of
/// the store, after the reply that caused them.
pub async fn counts_until(
    store: &crate::RedisStore,
    done: impl Fn(&crate::CallCounts) -> bool,
) -> crate::CallCounts {
    let started = std::time::Instant::now();
    loop {
        let counts = store.call_counts();
        if done(&counts) || started.elapsed() > Duration::from_secs(5) {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Loads the decision and refund scripts into the Redis at `url`, as a
/// store that has been running for a while has: a call held on its first
/// use (a [`Relay`] holding replies) would meet `NOSCRIPT`, whose held
/// reply makes the store load and send it again after its deadline, so
/// Redis would never run it in time.
pub async fn load_scripts(url: &str) {
    let client = redis::Client::open(url).expect("client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    for script in [
        crate::scripts::PLAN,
        crate::scripts::BATCH,
        crate::scripts::REFUND,
    ] {
        let _: String = redis::Script::new(script)
            .prepare_invoke()
            .load_async(&mut connection)
            .await
            .expect("SCRIPT LOAD");
    }
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` process of this test on 127.0.0.1, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// Set for a TLS-only server (see [`RedisServer::spawn_tls`]).
    tls: Option<TestCerts>,
}

impl RedisServer {
    /// Starts a Redis on a free loopback port (no persistence), or `None`
    /// when Redis is not installed (see [`redis_available`]).
    ///
    /// # Panics
    /// When Redis is installed but does not start, or is required and missing.
    pub fn spawn(test: &str) -> Option<Self> {
        Self::spawn_with(test, &[])
    }

    /// As [`RedisServer::spawn`], with extra `redis-server` arguments.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`].
    pub fn spawn_with(test: &str, extra: &[&str]) -> Option<Self> {
        Self::spawn_inner(test, extra, None)
    }

    /// A Redis that accepts only TLS connections (`--port 0 --tls-port P`),
    /// with a certificate for 127.0.0.1 signed by a CA the test makes
    /// itself ([`RedisServer::certs`]); clients need no certificate of
    /// their own. Its [`RedisServer::url`] is `rediss://127.0.0.1:P`.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`].
    pub fn spawn_tls(test: &str, extra: &[&str]) -> Option<Self> {
        Self::spawn_inner(test, extra, Some(None))
    }

    /// `tls`: `None` for plain TCP, `Some(None)` for TLS with fresh
    /// certificates, `Some(Some(certs))` for TLS with these (a cluster's
    /// nodes share one CA).
    fn spawn_inner(test: &str, extra: &[&str], tls: Option<Option<TestCerts>>) -> Option<Self> {
        if !redis_available(test) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the Redis working directory");
        let mut server = Self {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            tls: None,
        };
        server.tls = match tls {
            None => None,
            Some(Some(certs)) => Some(certs),
            Some(None) => Some(TestCerts::generate(&server.dir.join("certs"))),
        };
        // A port found free may be taken before Redis binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.start() {
                return Some(server);
            }
        }
        panic!("{test}: redis-server did not start");
    }

    /// Starts the process on `self.port` and waits (bounded) for PING.
    fn start(&mut self) -> bool {
        let port = self.port.to_string();
        let mut command = Command::new("redis-server");
        match &self.tls {
            None => command.args(["--port", &port]),
            Some(certs) => command
                .args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-cert-file")
                .arg(&certs.cert)
                .arg("--tls-key-file")
                .arg(&certs.key)
                .arg("--tls-ca-cert-file")
                .arg(&certs.ca),
        };
        command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let Ok(child) = command.spawn() else {
            return false;
        };
        self.child = Some(child);
        let port = self.port;
        let up = wait_for(250, || match &self.tls {
            None => raw_command(port, "PING").is_some_and(|r| r.starts_with("+PONG")),
            Some(_) => self.cli(&["PING"]).starts_with("PONG"),
        });
        if !up {
            self.kill();
        }
        up
    }

    /// The port Redis listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A cluster node's id (`CLUSTER MYID`), as `CLUSTER SETSLOT` and
    /// `redis-cli --cluster` name it.
    pub fn node_id(&self) -> String {
        self.cli(&["CLUSTER", "MYID"]).trim().to_string()
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The certificates of a TLS server ([`RedisServer::spawn_tls`]).
    pub fn certs(&self) -> Option<&TestCerts> {
        self.tls.as_ref()
    }

    /// The process id of the running `redis-server`, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGSTOP to the process: Redis freezes, connections stay open
    /// and commands sent meanwhile wait in the socket buffers.
    ///
    /// # Panics
    /// When the process is not running or `kill` cannot be run.
    pub fn stop_process(&self) {
        self.signal("-STOP");
    }

    /// Sends SIGCONT to a process stopped by [`RedisServer::stop_process`]:
    /// Redis runs the commands that waited.
    ///
    /// # Panics
    /// As [`RedisServer::stop_process`].
    pub fn continue_process(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().expect("redis-server is running");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts Redis again on the same port (after [`RedisServer::kill`]),
    /// with an empty data set, unless its extra arguments turned on an
    /// append-only file (`--appendonly yes`), which it loads.
    ///
    /// # Panics
    /// When it does not come back (bounded wait).
    pub fn restart(&mut self) {
        self.kill();
        let restarted = wait_for(100, || self.start());
        assert!(
            restarted,
            "redis-server did not restart on port {}",
            self.port
        );
    }

    /// Runs `redis-cli -p <port> <args>` and returns its standard output.
    ///
    /// # Panics
    /// When redis-cli cannot be run.
    pub fn cli(&self, args: &[&str]) -> String {
        match &self.tls {
            None => redis_cli(self.port, args),
            Some(certs) => {
                let ca = certs.ca.to_string_lossy();
                let mut tls_args = vec!["--tls", "--cacert", &ca];
                tls_args.extend_from_slice(args);
                redis_cli(self.port, &tls_args)
            }
        }
    }
}

/// Runs `redis-cli -p <port> <args>` and returns its standard output.
///
/// # Panics
/// When redis-cli cannot be run.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
