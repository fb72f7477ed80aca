//! Slow and idle HTTP clients on real loopback sockets, for the connection
//! limits' tests: many connections that send a request head a byte at a
//! time (or nothing at all), and a plain keep-alive connection that can be
//! asked whether the server has closed it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

/// What a slow client sends once connected.
#[derive(Debug, Clone, Copy)]
pub enum Slowness {
    /// Nothing at all.
    Silent,
    /// The start of a request head at once, then one more header byte every
    /// `every`, never finishing the head (the classic slowloris).
    Dribble {
        /// The pause between bytes.
        every: Duration,
    },
}

/// The start of a request head that a dribbling client sends at once.
const HEAD_START: &[u8] = b"GET /v1/check?client=slow HTTP/1.1\r\nHost: tollgate\r\nX-Slow: ";

/// Slow clients running on the current runtime.
#[derive(Debug)]
pub struct SlowClients {
    clients: JoinSet<Option<Duration>>,
}

impl SlowClients {
    /// Opens `count` connections to `addr` (each connect is bounded by
    /// `give_up_after` too), each behaving as `slowness` until the server
    /// closes it or `give_up_after` has passed since it connected.
    ///
    /// # Panics
    /// When a connection cannot be opened at all: the test cannot run.
    pub async fn start(
        addr: SocketAddr,
        count: usize,
        slowness: Slowness,
        give_up_after: Duration,
    ) -> Self {
        let mut clients = JoinSet::new();
        for _ in 0..count {
            let stream = timeout(give_up_after, TcpStream::connect(addr))
                .await
                .expect("connecting a slow client timed out")
                .expect("connect a slow client");
            clients.spawn(be_slow(stream, slowness, give_up_after));
        }
        Self { clients }
    }

    /// How long each connection lived before the server closed it; `None`
    /// for one still open when its client gave up.
    pub async fn lifetimes(mut self) -> Vec<Option<Duration>> {
        let mut lifetimes = Vec::new();
        while let Some(joined) = self.clients.join_next().await {
            lifetimes.push(joined.unwrap_or(None));
        }
        lifetimes
    }
}

/// Behaves as `slowness` on `stream` until the server closes it (returns
/// how long that took) or `give_up_after` passes (returns `None`).
async fn be_slow(
    mut stream: TcpStream,
    slowness: Slowness,
    give_up_after: Duration,
) -> Option<Duration> {
    let connected = Instant::now();
    let give_up = connected + give_up_after;
    let every = match slowness {
        Slowness::Silent => give_up_after,
        Slowness::Dribble { every } => {
            if stream.write_all(HEAD_START).await.is_err() {
                return Some(connected.elapsed());
            }
            every
        }
    };
    let mut buf = [0u8; 256];
    while Instant::now() < give_up {
        let next_byte = (Instant::now() + every).min(give_up);
        match tokio::time::timeout_at(next_byte, stream.read(&mut buf)).await {
            // The server closed (EOF or reset) or answered (a 408, then close).
            Ok(Ok(0) | Err(_)) => return Some(connected.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => {
                if matches!(slowness, Slowness::Dribble { .. })
                    && stream.write_all(b"x").await.is_err()
                {
                    return Some(connected.elapsed());
                }
            }
        }
    }
    None
}

/// A plain HTTP/1.1 keep-alive connection.
#[derive(Debug)]
pub struct KeepAlive {
    stream: TcpStream,
}

impl KeepAlive {
    /// Connects to `addr`.
    ///
    /// # Panics
    /// When the connection cannot be opened within 10 s.
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .expect("connecting timed out")
            .expect("connect");
        Self { stream }
    }

    /// Sends `GET path` (keep-alive) and returns the status, or `None` when
    /// no complete answer comes within `wait` or the connection is closed.
    pub async fn get(&mut self, path: &str, wait: Duration) -> Option<u16> {
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: tollgate\r\nX-Client-Id: keep-alive\r\n\r\n");
        self.stream.write_all(head.as_bytes()).await.ok()?;
        timeout(wait, self.read_answer()).await.ok()?
    }

    /// Waits for the answer to a request already sent (see [`KeepAlive::get`]).
    pub async fn answer_within(&mut self, wait: Duration) -> Option<u16> {
        timeout(wait, self.read_answer()).await.ok()?
    }

    /// Sends `GET path` without waiting for the answer.
    ///
    /// # Panics
    /// When the request cannot be written.
    pub async fn send(&mut self, path: &str) {
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: tollgate\r\nX-Client-Id: keep-alive\r\n\r\n");
        self.stream
            .write_all(head.as_bytes())
            .await
            .expect("send a request");
    }

    /// Sends raw bytes (e.g. part of a request).
    ///
    /// # Panics
    /// When they cannot be written.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send bytes");
    }

    /// Sends `bytes`; false when the connection is closed (the server
    /// closed it, say).
    pub async fn try_send_bytes(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// One answer: its head, then a `Content-Length` body.
    async fn read_answer(&mut self) -> Option<u16> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if self.stream.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body).await.ok()?;
        head.get(9..12)?.parse().ok()
    }

    /// Whether the server closes the connection within `wait` (EOF or
    /// reset); `false` when it is still open after `wait`.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }
}

/// Asserts that every slow connection of [`SlowClients::lifetimes`] was
/// closed by the server, and none later than `limit` after it opened.
///
/// # Panics
/// Naming how many were never closed, or which closed late.
pub fn assert_all_closed_within(lifetimes: &[Option<Duration>], limit: Duration) {
    let open = lifetimes.iter().filter(|l| l.is_none()).count();
    let late: Vec<Duration> = lifetimes
        .iter()
        .flatten()
        .copied()
        .filter(|l| *l > limit)
        .collect();
    assert_eq!(
        open,
        0,
        "{open} of {} slow connections were never closed",
        lifetimes.len()
    );
    assert!(
        late.is_empty(),
        "{} closed after {limit:?}: {late:?}",
        late.len()
    );
}
