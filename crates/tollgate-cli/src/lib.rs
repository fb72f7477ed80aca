//! The `tollgate` command line as a library, so that tests run each
//! subcommand in-process: `main.rs` only parses arguments and calls in here.
//!
//! `tollgate replay` in-process, on the embedded in-memory store:
//!
//! ```
//! use tollgate_cli::replay::{self, Memory};
//!
//! let session = "new sliding-window 2 1000\nallow a 0\nallow a 1\nallow a 2\nremaining a 1000\n";
//! let mut out = Vec::new();
//! let summary = replay::replay(session.as_bytes(), &mut out, &mut Memory::default())?;
//! assert_eq!(String::from_utf8(out)?, "ok\ntrue\ntrue\nfalse\n1\n");
//! assert_eq!((summary.allowed, summary.rejected), (2, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod lines;
pub mod logging;
pub mod progress;
pub mod proxy;
pub mod redis_args;
pub mod replay;
pub mod simulate;
