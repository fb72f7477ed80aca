//! A loopback TCP relay in front of a real `redis-server` that can hold
//! Redis's replies on their way back: the network fault in which Redis runs
//! a call in time but its answer reaches the caller only after the caller
//! gave up; or drop the connections with the replies they hold: the fault
//! in which Redis runs a call but its answer never comes. It can hold the
//! requests on their way in as well, so that a cut drops a call Redis never
//! saw; or delay each connection's first reply, as a slow link does.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a relay thread looks up from a blocked read or a held reply
/// to see whether the relay is being dropped.
const POLL: Duration = Duration::from_millis(50);

/// Which way the bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// From the caller to Redis.
    Requests,
    /// From Redis back to the caller.
    Replies,
}

/// What is held now.
#[derive(Default)]
struct Held {
    requests: bool,
    replies: bool,
}

impl Held {
    fn of(&self, way: Way) -> bool {
        match way {
            Way::Requests => self.requests,
            Way::Replies => self.replies,
        }
    }
}

#[derive(Default)]
struct Shared {
    held: Mutex<Held>,
    /// Bytes of requests held, for [`Relay::requests_waiting`].
    requests_waiting: AtomicUsize,
    /// Every request held since requests were last held, for
    /// [`Relay::requests_held`].
    held_log: Mutex<Vec<u8>>,
    released: Condvar,
    stopping: AtomicBool,
    /// How long the first reply of each connection waits before it is
    /// passed on, in ms ([`Relay::delay_first_reply`]).
    first_reply_delay_ms: AtomicU64,
    /// Raised by [`Relay::cut`]: connections of an older generation close.
    generation: AtomicU64,
    /// Both ends of every connection relayed, for [`Relay::cut`].
    open: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Waits while `way` is held (or until the relay is dropped).
    fn wait_released(&self, way: Way) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while held.of(way) && !self.stopping() {
            held = self
                .released
                .wait_timeout(held, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn is_held(&self, way: Way) -> bool {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .of(way)
    }

    /// Notes `bytes` of requests held.
    fn hold(&self, bytes: &[u8]) {
        self.requests_waiting
            .fetch_add(bytes.len(), Ordering::SeqCst);
        self.held_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
    }

    /// Notes `len` bytes of requests held passed on (or dropped).
    fn passed(&self, len: usize) {
        self.requests_waiting.fetch_sub(len, Ordering::SeqCst);
    }

    fn set_held(&self, change: impl FnOnce(&mut Held)) {
        change(&mut self.held.lock().unwrap_or_else(PoisonError::into_inner));
        self.released.notify_all();
    }
}

/// Relays every connection made to its loopback port to a Redis on
/// 127.0.0.1:`upstream`: requests and replies pass at once unless held
/// ([`Relay::hold_requests`], [`Relay::hold_replies`]), in which case they
/// wait, in order, until released or cut. Its threads end when it is
/// dropped.
pub struct Relay {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// A relay on a free loopback port to the Redis at 127.0.0.1:`upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start(upstream: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopping() {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                    let mut open = accepting
                        .open
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    open.extend([a, b]);
                }
                let generation = accepting.generation();
                pipe(
                    &client,
                    &server,
                    accepting.clone(),
                    Way::Requests,
                    generation,
                );
                pipe(
                    &server,
                    &client,
                    accepting.clone(),
                    Way::Replies,
                    generation,
                );
            }
        });
        Relay {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// The relay's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on, the first reply of every new connection waits `delay`
    /// before it is passed on (the later ones pass at once): a slow link
    /// or a slow handshake, which a connection's set-up must wait out.
    pub fn delay_first_reply(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.first_reply_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// From now on, replies read from Redis wait before they are passed on.
    pub fn hold_replies(&self) {
        self.shared.set_held(|held| held.replies = true);
    }

    /// Passes on the replies held, in order, and every reply after them.
    pub fn release_replies(&self) {
        self.shared.set_held(|held| held.replies = false);
    }

    /// From now on, requests read from the caller wait before they are
    /// passed on to Redis (the relay goes on reading them: see
    /// [`Relay::requests_held`]).
    pub fn hold_requests(&self) {
        self.shared
            .held_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.shared.set_held(|held| held.requests = true);
    }

    /// Passes on the requests held, in order, and every request after them.
    pub fn release_requests(&self) {
        self.shared.set_held(|held| held.requests = false);
    }

    /// How many bytes of requests wait to be passed on (held).
    pub fn requests_waiting(&self) -> usize {
        self.shared.requests_waiting.load(Ordering::SeqCst)
    }

    /// Every request held since [`Relay::hold_requests`], as the caller
    /// wrote them (Redis's protocol), passed on since or not.
    pub fn requests_held(&self) -> Vec<u8> {
        self.shared
            .held_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Closes every connection made so far, both ways, dropping the
    /// requests and replies it holds (they never reach Redis, or the
    /// caller); connections made after pass both again.
    pub fn cut(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        let open = std::mem::take(
            &mut *self
                .shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.shared.set_held(|held| *held = Held::default());
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.set_held(|held| *held = Held::default());
        // Wakes the accepting thread, which then sees that it must stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Copies `from` to `to` in a thread of its own until either side closes,
/// the relay is dropped or the connection's `generation` is cut, waiting
/// while its `way` is held.
fn pipe(from: &TcpStream, to: &TcpStream, shared: Arc<Shared>, way: Way, generation: u64) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    if from.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        // Requests read while requests are held, to be passed on once they
        // are released (and dropped if the connection is cut first).
        let mut held = Vec::new();
        let mut first_reply = way == Way::Replies;
        let cut = || shared.generation() != generation;
        while !shared.stopping() && !cut() {
            let n = match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
                Err(_) => break,
            };
            if way == Way::Requests {
                if shared.is_held(way) {
                    shared.hold(&buffer[..n]);
                    held.extend_from_slice(&buffer[..n]);
                    continue;
                }
                if cut() {
                    break;
                }
                if !held.is_empty() {
                    shared.passed(held.len());
                    if to.write_all(&std::mem::take(&mut held)).is_err() {
                        break;
                    }
                }
            } else if n > 0 {
                if std::mem::take(&mut first_reply) {
                    let delay = shared.first_reply_delay_ms.load(Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(delay));
                }
                shared.wait_released(way);
            }
            if cut() {
                break;
            }
            if n > 0 && to.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        // Requests still held are dropped with the connection.
        shared.passed(held.len());
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
