//! Store errors in the log, rate-limited: a store that is down fails every
//! request, and its messages (a Redis error names the script's SHA and its
//! Lua line) belong in the log, not in answers. At most one line per
//! [`LOG_INTERVAL_MS`] per kind of error, saying how many were suppressed
//! since the last line.

use std::sync::{Mutex, PoisonError};

use tollgate::StoreError;

/// At most one log line per kind of error in this many ms.
pub const LOG_INTERVAL_MS: u64 = 1_000;

/// The kinds of store failure, each logged on its own schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The store did not answer within the timeout.
    Timeout,
    /// An error that may go away by itself.
    Transient,
    /// An error that retrying cannot fix.
    Permanent,
}

impl ErrorKind {
    pub(crate) fn of(error: &StoreError) -> Self {
        if error.is_transient() {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Transient => "transient",
            ErrorKind::Permanent => "permanent",
        }
    }
}

/// One kind of log line, written at most once per [`LOG_INTERVAL_MS`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Throttle {
    /// When the last line was written (None: never).
    logged_at: Option<u64>,
    /// Lines not written since then.
    suppressed: u64,
}

impl Throttle {
    /// Whether a line at `now_ms` is written, and if so how many were held
    /// back before it. A time earlier than the last line (a clock stepped
    /// back) logs at once rather than going quiet.
    pub(crate) fn admit(&mut self, now_ms: u64) -> Option<u64> {
        let due = match self.logged_at {
            None => true,
            Some(at) => now_ms < at || now_ms - at >= LOG_INTERVAL_MS,
        };
        if !due {
            self.suppressed += 1;
            return None;
        }
        self.logged_at = Some(now_ms);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// The rate-limited log of one guarded store.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    windows: Mutex<[Throttle; 3]>,
}

impl ErrorLog {
    /// Whether an error of `kind` at `now_ms` gets a log line, and if so how
    /// many were suppressed before it ([`Throttle::admit`]).
    fn admit(&self, kind: ErrorKind, now_ms: u64) -> Option<u64> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows[kind as usize].admit(now_ms)
    }

    /// Logs `message` (an error of `kind`) unless a line of its kind was
    /// written less than [`LOG_INTERVAL_MS`] ago. Returns whether it logged.
    pub(crate) fn log(&self, kind: ErrorKind, now_ms: u64, message: &str, answer: &str) -> bool {
        let Some(suppressed) = self.admit(kind, now_ms) else {
            return false;
        };
        let kind_name = kind.as_str();
        match kind {
            ErrorKind::Permanent => tracing::error!(
                kind = kind_name,
                suppressed,
                answer,
                error = message,
                "the store failed; the failure policy answers"
            ),
            ErrorKind::Timeout | ErrorKind::Transient => tracing::warn!(
                kind = kind_name,
                suppressed,
                answer,
                error = message,
                "the store failed; the failure policy answers"
            ),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_second_per_kind_with_the_suppressed_count() {
        let log = ErrorLog::default();
        assert_eq!(log.admit(ErrorKind::Transient, 10_000), Some(0));
        assert_eq!(log.admit(ErrorKind::Transient, 10_500), None);
        assert_eq!(log.admit(ErrorKind::Transient, 10_999), None);
        // Another kind has its own schedule.
        assert_eq!(log.admit(ErrorKind::Permanent, 10_999), Some(0));
        assert_eq!(log.admit(ErrorKind::Transient, 11_000), Some(2));
        assert_eq!(log.admit(ErrorKind::Transient, 11_001), None);
        // A clock stepped back logs at once.
        assert_eq!(log.admit(ErrorKind::Transient, 5_000), Some(1));
        assert_eq!(log.admit(ErrorKind::Timeout, 5_000), Some(0));
    }
}
