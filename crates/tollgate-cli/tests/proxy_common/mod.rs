//! What the tests of the real `tollgate proxy` binary share.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Child;

/// The proxy's start-up line, read from its piped standard output, and the
/// address it says it listens on.
///
/// # Panics
/// When the line names no address.
pub fn read_banner(child: &mut Child) -> (String, SocketAddr) {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .expect("read the start-up line");
    let addr = line
        .strip_prefix("tollgate proxy: listening on http://")
        .and_then(|rest| rest.split(',').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no address in the banner: {line:?}"));
    (line, addr)
}
