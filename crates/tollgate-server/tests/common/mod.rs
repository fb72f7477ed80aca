//! An in-process server on 127.0.0.1 port 0 with a hand-moved clock, and a
//! small HTTP client for it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_server::{Config, Error, Server, StoreHandle};

/// The time every test server starts at.
pub const START_MS: u64 = 1_700_000_000_000;

/// A running server.
pub struct TestServer {
    pub base: String,
    pub server: Server,
    pub clock: Arc<ManualClock>,
    pub http: reqwest::Client,
    pub config_path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), Error>>>,
    _dir: tempfile::TempDir,
}

/// One answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

impl TestServer {
    /// A memory-store server on `config_text`, which is also written to a
    /// file that [`Server::reload`] reads.
    pub async fn start(config_text: &str) -> Self {
        let config = Config::parse(config_text).expect("test config is valid");
        let store = StoreHandle::for_config(&config).unwrap();
        Self::start_with(config_text, config, store).await
    }

    /// A server on `config_text` with the given store.
    pub async fn start_with(config_text: &str, config: Config, store: StoreHandle) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("tollgate.toml");
        std::fs::write(&config_path, config_text).unwrap();
        let clock = Arc::new(ManualClock::new(START_MS));
        let server = Server::new(config, store, clock.clone()).with_config_path(&config_path);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(tollgate_server::run(listener, server.clone(), async {
            let _ = stopped.await;
        }));
        Self {
            base,
            server,
            clock,
            http: reqwest::Client::new(),
            config_path,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    async fn answer(response: reqwest::Response) -> Answer {
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }

    /// `POST /v1/check` with a raw body.
    pub async fn post_check(&self, body: impl Into<reqwest::Body>) -> Answer {
        self.post_json("/v1/check", body).await
    }

    /// `POST path` (which may carry a query) with a raw JSON body.
    pub async fn post_json(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        Self::answer(response).await
    }

    /// `POST /v1/check` for `client` with `cost`.
    pub async fn check(&self, client: &str, cost: u32) -> Answer {
        self.post_check(format!(
            r#"{{"client":{},"cost":{cost}}}"#,
            serde_json::json!(client)
        ))
        .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        Self::answer(response).await
    }

    /// `GET path` with headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = self.http.get(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Self::answer(request.send().await.unwrap()).await
    }

    /// Remaining requests of `client` under limit `index` of its plan.
    pub async fn remaining(&self, client: &str, index: usize) -> u64 {
        let answer = self.get(&format!("/v1/remaining/{client}")).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        answer.json()["limits"][index]["remaining"]
            .as_u64()
            .unwrap()
    }

    /// Writes a new config file (reload it with `self.server.reload()`).
    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config_path, text).unwrap();
    }

    /// Asks the server to stop and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

/// The config most tests use: `free` = 2 per second (sliding window) and
/// 5 per day (token bucket); `paid` = 10 per second; `dark` has a shadow limit.
pub const CONFIG: &str = r#"
default_plan = "free"
max_cost = 1000

[clients]
acme = "paid"

[[plans.free]]
name = "1s"
policy = "sliding-window"
limit = 2
window = "1s"

[[plans.free]]
name = "1d"
policy = "token-bucket"
limit = 5
window = "1d"

[[plans.paid]]
name = "1s"
policy = "sliding-window"
limit = 10
window = "1s"

[[plans.dark]]
name = "real"
policy = "sliding-window"
limit = 3
window = "1s"

[[plans.dark]]
name = "trial"
policy = "gcra"
limit = 1
window = "1s"
shadow = true
"#;
