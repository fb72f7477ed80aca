//! What a test's process logs, read as it comes, so that a test can wait
//! for a line while the process runs.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A process's output (its standard error, say), read line by line by a
/// thread of its own into one text.
#[derive(Debug)]
pub struct Log {
    text: Arc<Mutex<String>>,
    reader: JoinHandle<()>,
}

impl Log {
    /// Starts reading `output` (e.g. `child.stderr.take().unwrap()`).
    pub fn read(output: impl Read + Send + 'static) -> Self {
        let text = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                let mut text = sink.lock().unwrap_or_else(PoisonError::into_inner);
                text.push_str(&line);
                text.push('\n');
            }
        });
        Self { text, reader }
    }

    /// Everything read so far.
    pub fn so_far(&self) -> String {
        self.text
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits (at most 15 s) until the output says `needle`.
    ///
    /// # Panics
    /// When it never does, with what it said.
    pub fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.so_far().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "never logged {needle:?}:\n{}",
                self.so_far()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything, once the output has ended (the process exited).
    pub fn finish(self) -> String {
        let Self { text, reader } = self;
        let _ = reader.join();
        let text = text.lock().unwrap_or_else(PoisonError::into_inner);
        text.clone()
    }
}
