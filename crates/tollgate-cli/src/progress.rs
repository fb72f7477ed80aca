//! The progress bar of `replay` and `simulate` on long inputs (`indicatif`).
//!
//! Shown only when standard error is a terminal: piped or redirected runs
//! (scripts, CI, tests) get no escape codes, and standard output is never
//! touched.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on standard error, or nothing when it is not a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `total_bytes` when known (a file), else a spinner counting
    /// lines (standard input). Hidden unless standard error is a terminal.
    pub fn on_stderr(total_bytes: Option<u64>) -> Self {
        Self::new(std::io::stderr().is_terminal(), total_bytes)
    }

    /// A bar drawn on standard error when `visible`, else nothing at all.
    pub fn new(visible: bool, total_bytes: Option<u64>) -> Self {
        if !visible {
            return Self { bar: None };
        }
        let (bar, template) = match total_bytes {
            Some(total) => (
                ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()),
                "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} {msg} (eta {eta})",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                "{spinner} {elapsed_precise} {bytes} {msg}",
            ),
        };
        // The templates are fixed; a template error would only lose the style.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self { bar: Some(bar) }
    }

    /// Whether anything is drawn.
    pub fn is_visible(&self) -> bool {
        self.bar.is_some()
    }

    /// Moves the bar to `bytes_read`, with `lines` read so far.
    pub fn update(&self, bytes_read: u64, lines: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(bytes_read);
            bar.set_message(format!("{lines} lines"));
        }
    }

    /// Removes the bar, leaving the terminal as it was.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
