//! A process that a test started, stopped when the test ends, passed or
//! failed.
//!
//! A test that spawns `tollgate serve`, a proxy or Envoy and then fails an
//! assertion before stopping it would otherwise leave the process running
//! (a `std::process::Child` is not killed when dropped), holding its ports
//! and CPU for every later test and after CI.

mod log;

pub use log::Log;

use std::ops::{Deref, DerefMut};
use std::process::{Child, Command};

/// A child process, killed by its PID and reaped when dropped if it is
/// still running. It dereferences to its [`Child`], so a test waits for it,
/// reads its pipes and takes its PID as usual.
#[derive(Debug)]
pub struct ChildGuard(Child);

impl ChildGuard {
    /// Spawns `command` under a guard.
    ///
    /// # Errors
    /// When the process cannot be started (the error of [`Command::spawn`]).
    pub fn spawn(command: &mut Command) -> std::io::Result<Self> {
        command.spawn().map(Self)
    }

    /// Sends the signal `name` (`TERM`, `HUP`, `STOP`, ...) to the process
    /// with `kill(1)`: the tests signal by PID, as an operator would.
    ///
    /// # Panics
    /// When `kill` cannot be run or fails (the process is gone): the test
    /// fails, saying which signal.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.0.id().to_string()])
            .status()
            .unwrap_or_else(|error| panic!("run kill -{name}: {error}"));
        assert!(status.success(), "kill -{name} {} failed", self.0.id());
    }
}

impl From<Child> for ChildGuard {
    fn from(child: Child) -> Self {
        Self(child)
    }
}

impl Deref for ChildGuard {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // A process the test already waited for has exited: nothing to do.
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// The PID's `/proc` entry, while the process exists (a zombie included).
    fn exists(pid: u32) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn a_running_process_is_killed_and_reaped_when_its_guard_is_dropped() {
        let guard = ChildGuard::spawn(Command::new("sleep").arg("60").stdout(Stdio::null()))
            .expect("run sleep");
        let pid = guard.id();
        assert!(exists(pid));
        drop(guard);
        assert!(!exists(pid), "sleep {pid} still there after its guard");
    }

    #[test]
    fn signal_reaches_the_process() {
        let mut guard = ChildGuard::spawn(Command::new("sleep").arg("60")).expect("run sleep");
        guard.signal("TERM");
        let status = guard.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(15));
    }
}
