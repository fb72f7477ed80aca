//! Where the proxy's worker threads run: wherever the scheduler puts them
//! (the default), or each on a CPU of its own (`--pin-workers`).
//!
//! Why pinning helps: each worker is a single-threaded runtime, so no
//! worker can take over another's connections. On a host whose cores are
//! also busy with other processes (the upstream, a load generator), Linux
//! now and then runs two workers on one core while the other core runs the
//! rest, and the connections of the worker waiting for its turn wait a
//! whole time slice: on 2 cores, a p99 of about 4 ms against a median of
//! 0.33 ms, and 0.75-0.80 ms with the workers pinned (BENCHMARKS.md,
//! "The proxy's p99: workers sharing a core"). Why it is not the default:
//! a worker pinned to a core that something else keeps busy cannot move
//! away from it, as nginx's `worker_cpu_affinity`, also off by default,
//! warns.

use core_affinity::CoreId;

use crate::Error;

/// Where each worker thread of [`run_workers`](crate::run_workers) runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Empty: anywhere. Otherwise worker `i` runs on `cpus[i % cpus.len()]`.
    cpus: Vec<usize>,
}

impl Placement {
    /// Wherever the scheduler puts them.
    pub fn anywhere() -> Self {
        Self::default()
    }

    /// Each worker on one CPU of those this thread may run on (its affinity
    /// mask, as `taskset` or a cpuset leaves it), taken in turn: with more
    /// workers than CPUs, several share one.
    ///
    /// # Errors
    /// [`Error::Pinning`] when the CPUs cannot be read.
    pub fn one_cpu_each() -> Result<Self, Error> {
        match core_affinity::get_core_ids() {
            Some(cpus) if !cpus.is_empty() => Ok(Self {
                cpus: cpus.iter().map(|cpu| cpu.id).collect(),
            }),
            _ => Err(Error::Pinning(
                "the CPUs this process may run on cannot be read".to_owned(),
            )),
        }
    }

    /// The CPU worker `index` runs on; `None` when it may run anywhere.
    pub fn cpu_of(&self, index: usize) -> Option<usize> {
        (!self.cpus.is_empty()).then(|| self.cpus[index % self.cpus.len()])
    }

    /// Moves the calling thread, worker `index`, to its CPU (nothing to do
    /// when it may run anywhere).
    pub(crate) fn apply(&self, index: usize) -> Result<(), Error> {
        let Some(cpu) = self.cpu_of(index) else {
            return Ok(());
        };
        if core_affinity::set_for_current(CoreId { id: cpu }) {
            Ok(())
        } else {
            Err(Error::Pinning(format!(
                "worker {index} could not be moved to CPU {cpu}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_take_the_cpus_in_turn() {
        let placement = Placement {
            cpus: vec![2, 5, 7],
        };
        let cpus: Vec<_> = (0..5).map(|index| placement.cpu_of(index)).collect();
        assert_eq!(cpus, [Some(2), Some(5), Some(7), Some(2), Some(5)]);
        assert_eq!(Placement::anywhere().cpu_of(0), None);
    }

    #[test]
    fn one_cpu_each_takes_the_cpus_this_thread_may_run_on() {
        let placement = Placement::one_cpu_each().unwrap();
        let allowed =
            tollgate_testkit::cpus::allowed_cpus(std::path::Path::new("/proc/thread-self"));
        assert_eq!(Some(placement.cpus), allowed);
    }
}
