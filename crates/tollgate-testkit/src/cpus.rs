//! Which CPUs a thread may run on, read back from Linux's /proc: how the
//! proxy's tests see where its workers were placed.

use std::path::Path;

/// The CPUs of a list as Linux writes them (`0-3,6`).
///
/// # Panics
/// When `list` is not such a list.
pub fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let number = |n: &str| {
            n.parse::<usize>()
                .unwrap_or_else(|_| panic!("CPU list {list:?}"))
        };
        cpus.extend(number(first)..=number(last));
    }
    cpus
}

/// The CPUs the thread or process whose /proc directory is `dir` (e.g.
/// `/proc/self`, `/proc/PID/task/TID`) may run on: its `Cpus_allowed_list`.
/// `None` when it has ended.
pub fn allowed_cpus(dir: &Path) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
    Some(parse_cpu_list(list))
}

/// Each thread of the process `pid` (a number, or `self`) whose name
/// starts with `prefix`: its name and the CPUs it may run on, by name.
pub fn thread_cpus(pid: &str, prefix: &str) -> Vec<(String, Vec<usize>)> {
    let mut threads = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return threads;
    };
    for task in tasks.flatten() {
        let task = task.path();
        let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let name = name.trim();
        if !name.starts_with(prefix) {
            continue;
        }
        if let Some(cpus) = allowed_cpus(&task) {
            threads.push((name.to_owned(), cpus));
        }
    }
    threads.sort();
    threads
}

/// [`thread_cpus`], polled (at most 5 s) until it equals `expected`: a
/// thread moves itself once it has started. Returns the last reading.
pub fn wait_for_thread_cpus(
    pid: &str,
    prefix: &str,
    expected: &[(String, Vec<usize>)],
) -> Vec<(String, Vec<usize>)> {
    let mut seen = Vec::new();
    for _ in 0..500 {
        seen = thread_cpus(pid, prefix);
        if seen == expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_read_as_linux_writes_them() {
        assert_eq!(parse_cpu_list("0-3,6\n"), [0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("5"), [5]);
    }

    #[test]
    fn this_process_may_run_on_some_cpu() {
        let cpus = allowed_cpus(Path::new("/proc/self")).unwrap();
        assert!(!cpus.is_empty());
        assert!(thread_cpus("self", "")
            .iter()
            .any(|(_, mine)| *mine == cpus));
    }
}
