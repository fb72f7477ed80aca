//! A real headless Chromium, driven over WebDriver (`chromedriver` +
//! the `fantoccini` crate), for tests of what a person looks at: the
//! dashboard, an HTML report. Feature `browser`.
//!
//! [`Browser::start`] runs Debian's `chromedriver` on a free loopback port
//! with `/usr/bin/chromium` (`TOLLGATE_CHROMEDRIVER` / `TOLLGATE_CHROMIUM`
//! pick others) in a fresh profile. When either is missing it returns
//! `None` after printing `SKIPPED ...` on standard error, so the caller can
//! skip; with `TOLLGATE_REQUIRE_BROWSER=1` (set by CI and `scripts/test.sh`)
//! it panics instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};

/// The WebDriver client crate, for locators and element calls in tests.
pub use fantoccini;

fn chromium_path() -> PathBuf {
    std::env::var_os("TOLLGATE_CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from)
}

fn chromedriver_path() -> PathBuf {
    std::env::var_os("TOLLGATE_CHROMEDRIVER").map_or_else(|| "chromedriver".into(), PathBuf::from)
}

fn runs(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Chromium's flags for a headless run as root in a container, with nothing
/// reaching out to the network by itself.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

/// A headless Chromium session and the `chromedriver` it runs under.
pub struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromedriver` and a Chromium session whose window is
    /// `width` x `height` CSS pixels; `None` (after saying why) when the
    /// browser is not installed.
    ///
    /// # Panics
    /// When the browser is missing and `TOLLGATE_REQUIRE_BROWSER=1` (see
    /// [`crate::skip`]), or when an installed browser cannot be started.
    pub async fn start(test: &str, width: u32, height: u32) -> Option<Self> {
        let (chromium, driver) = (chromium_path(), chromedriver_path());
        if !(runs(&chromium) && runs(&driver)) {
            let why = format!(
                "{} or {} not installed (apt-get install chromium chromium-driver)",
                chromium.display(),
                driver.display()
            );
            crate::skip(test, &why, "TOLLGATE_REQUIRE_BROWSER");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let driver = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({"binary": chromium.display().to_string(), "args": args}),
        );
        let mut browser = Self {
            client: None,
            driver,
            profile,
        };
        let url = format!("http://127.0.0.1:{port}");
        // chromedriver takes a moment to listen: retry, bounded in time.
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let connected =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities.clone())
                    .connect(&url)
                    .await;
            match connected {
                Ok(client) => break client,
                Err(e) if Instant::now() > deadline => panic!("{test}: no WebDriver session: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        browser.client = Some(client);
        Some(browser)
    }

    /// This session's Chromium profile directory: every Chromium process of
    /// the session names it on its command line (`--user-data-dir`).
    pub fn profile_dir(&self) -> &Path {
        self.profile.path()
    }

    /// The PIDs of the processes whose command line names
    /// [`Browser::profile_dir`]: this session's Chromium and its helpers.
    pub fn processes(&self) -> Vec<String> {
        processes_using(self.profile.path())
    }

    /// The WebDriver client (navigate, find, click, type, run scripts).
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("a session until finish()")
    }

    /// Opens a local HTML file (`file://`), e.g. a self-contained report.
    ///
    /// # Panics
    /// When the path cannot be made absolute or the browser cannot open it.
    pub async fn open_file(&self, path: &Path) {
        let path = std::fs::canonicalize(path).expect("the file exists");
        let url = format!("file://{}", path.display());
        self.client()
            .goto(&url)
            .await
            .expect("the browser opens the file");
    }

    /// Runs `script` (a function body returning a value) until it returns
    /// `true`, every 100 ms for at most `timeout`; returns whether it did.
    pub async fn wait_until(&self, script: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let done = self.client().execute(script, vec![]).await;
            if matches!(done, Ok(serde_json::Value::Bool(true))) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a PNG of the window to each of `paths` (directories are made).
    ///
    /// # Panics
    /// When the screenshot cannot be taken or written.
    pub async fn screenshot(&self, paths: &[&Path]) -> Vec<u8> {
        let png = self.client().screenshot().await.expect("a screenshot");
        for path in paths {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).expect("the screenshot's directory");
            }
            std::fs::write(path, &png).expect("the screenshot is written");
        }
        png
    }

    /// Ends the session (Chromium exits) and stops `chromedriver`.
    pub async fn finish(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }
}

impl Drop for Browser {
    /// Stops `chromedriver`, and, when the session was not ended by
    /// [`Browser::finish`] (a test that failed first), the Chromium
    /// processes it started: killing `chromedriver` leaves them running.
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        if self.client.is_some() {
            for pid in processes_using(self.profile.path()) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        }
    }
}

/// The PIDs of the processes whose command line names `profile` (this
/// session's Chromium and its helpers, started with `--user-data-dir`).
fn processes_using(profile: &Path) -> Vec<String> {
    let needle = profile.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().into_string().ok()?;
            pid.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&needle)
                .then_some(pid)
        })
        .collect()
}
