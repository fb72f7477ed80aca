//! The real `tollgate proxy` binary's worker threads: with `--pin-workers`
//! each runs on a CPU of its own, taken in turn from those the process may
//! run on (a `taskset` narrows them), and says so at start-up; without it
//! they may run on every one.
//! Read back from Linux's /proc while a real upstream is served.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use tollgate_testkit::cpus::{allowed_cpus, wait_for_thread_cpus};
use tollgate_testkit::process::ChildGuard;
use tollgate_testkit::{counting_upstream, get_status};

mod proxy_common;
use proxy_common::read_banner;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// `tollgate proxy` with two workers and `extra` flags in front of
/// `upstream`, on the CPU `only_cpu` alone if given (`taskset`, which
/// execs it: same PID): the process, its start-up line and its address.
fn start_proxy(
    upstream: SocketAddr,
    only_cpu: Option<usize>,
    extra: &[&str],
) -> (ChildGuard, String, SocketAddr) {
    let mut command = match only_cpu {
        None => Command::new(BIN),
        Some(cpu) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &cpu.to_string(), BIN]);
            taskset
        }
    };
    let mut child = ChildGuard::spawn(
        command
            .args(["proxy", "--upstream", &format!("http://{upstream}")])
            .args(["--listen", "127.0.0.1:0", "--workers", "2"])
            .args(["--policy", "gcra", "--limit", "1000", "--window", "1s"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let (banner, addr) = read_banner(&mut child);
    (child, banner, addr)
}

/// Two workers' threads and the CPUs each may run on.
fn workers(first: Vec<usize>, second: Vec<usize>) -> Vec<(String, Vec<usize>)> {
    vec![
        ("proxy-worker-0".to_owned(), first),
        ("proxy-worker-1".to_owned(), second),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_workers_puts_each_worker_on_a_cpu_of_its_own() {
    let (upstream, _) = counting_upstream().await;
    tokio::task::spawn_blocking(move || {
        let process = allowed_cpus(Path::new("/proc/self")).unwrap();
        let in_turn = |index: usize| process[index % process.len()];

        let (mut pinned, banner, addr) = start_proxy(upstream, None, &["--pin-workers"]);
        let said = format!(
            "2 worker thread(s) pinned to CPUs {}, {};",
            in_turn(0),
            in_turn(1)
        );
        let expected = workers(vec![in_turn(0)], vec![in_turn(1)]);
        let cpus = wait_for_thread_cpus(&pinned.id().to_string(), "proxy-worker-", &expected);
        let status = get_status(addr, "/", &[]);
        let _ = pinned.kill();
        let _ = pinned.wait();
        assert!(banner.contains(&said), "{banner}");
        assert_eq!(cpus, expected);
        assert_eq!(status, 200);

        let (mut anywhere, banner, addr) = start_proxy(upstream, None, &[]);
        let expected = workers(process.clone(), process.clone());
        let cpus = wait_for_thread_cpus(&anywhere.id().to_string(), "proxy-worker-", &expected);
        let status = get_status(addr, "/", &[]);
        let _ = anywhere.kill();
        let _ = anywhere.wait();
        assert!(banner.contains("2 worker thread(s);"), "{banner}");
        assert_eq!(cpus, expected);
        assert_eq!(status, 200);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_workers_takes_only_the_cpus_the_process_may_run_on() {
    let (upstream, _) = counting_upstream().await;
    tokio::task::spawn_blocking(move || {
        // The last CPU this test may run on: with `taskset` leaving the
        // proxy only that one, both workers share it, whatever the machine
        // has besides.
        let cpu = *allowed_cpus(Path::new("/proc/self"))
            .unwrap()
            .last()
            .unwrap();
        let (mut proxy, banner, addr) = start_proxy(upstream, Some(cpu), &["--pin-workers"]);
        let expected = workers(vec![cpu], vec![cpu]);
        let cpus = wait_for_thread_cpus(&proxy.id().to_string(), "proxy-worker-", &expected);
        let status = get_status(addr, "/", &[]);
        let _ = proxy.kill();
        let _ = proxy.wait();
        let said = format!("2 worker thread(s) pinned to CPUs {cpu}, {cpu};");
        assert!(banner.contains(&said), "{banner}");
        assert_eq!(cpus, expected);
        assert_eq!(status, 200);
    })
    .await
    .unwrap();
}

/// More workers than the limit on open files lets start are refused by the
/// flag's name (each takes a socket, a thread and an event queue): the
/// system's bare "Too many open files" named nothing (a review).
#[test]
fn workers_past_the_open_files_limit_are_refused_by_name() {
    let upstream = "http://127.0.0.1:9";
    let output = Command::new("sh")
        .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\"", BIN])
        .args(["proxy", "--upstream", upstream, "--listen", "127.0.0.1:0"])
        .args(["--workers", "1000"])
        .output()
        .expect("sh runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("--workers"), "{stderr}");
    assert!(stderr.contains("ulimit -n"), "{stderr}");
}
