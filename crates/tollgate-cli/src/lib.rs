//! The `tollgate` command line as a library, so that tests run each
//! subcommand in-process: `main.rs` only parses arguments and calls in here.

pub mod lines;
pub mod progress;
pub mod proxy;
pub mod redis_args;
pub mod replay;
pub mod simulate;
