//! The real `tollgate proxy` binary's worker threads: with `--pin-workers`
//! each runs on a CPU of its own, taken in turn from those the process may
//! run on, and says so at start-up; without it they may run on every one.
//! Read back from Linux's /proc while a real upstream is served.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tollgate_testkit::{counting_upstream, get_status};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The CPUs in a list as Linux writes them (`0-3,6`).
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(first.parse::<usize>().unwrap()..=last.parse::<usize>().unwrap());
    }
    cpus
}

/// The `Cpus_allowed_list` of a /proc status file.
fn allowed_cpus(status_path: &str) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(status_path).ok()?;
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
    Some(parse_cpu_list(list))
}

/// The CPUs of each of `pid`'s threads named `proxy-worker-N`, by N, once
/// there are `workers` of them and they match `expected` (polled, at most
/// 5 s: a worker moves itself when it starts).
fn worker_cpus(pid: u32, workers: usize, expected: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut seen = Vec::new();
    for _ in 0..500 {
        let mut threads: Vec<(usize, Vec<usize>)> = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
                continue;
            };
            let Some(index) = name.trim().strip_prefix("proxy-worker-") else {
                continue;
            };
            let status = task.join("status");
            if let Some(cpus) = allowed_cpus(status.to_str().unwrap()) {
                threads.push((index.parse().unwrap(), cpus));
            }
        }
        threads.sort();
        seen = threads.into_iter().map(|(_, cpus)| cpus).collect();
        if seen.len() == workers && seen == expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    seen
}

/// `tollgate proxy` with two workers and `extra` flags in front of
/// `upstream`: the process and its start-up line.
fn start_proxy(upstream: SocketAddr, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["proxy", "--upstream", &format!("http://{upstream}")])
        .args(["--listen", "127.0.0.1:0", "--workers", "2"])
        .args(["--policy", "gcra", "--limit", "1000", "--window", "1s"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

fn listening_on(banner: &str) -> SocketAddr {
    banner
        .strip_prefix("tollgate proxy: listening on http://")
        .and_then(|rest| rest.split(',').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no address in the banner: {banner:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_workers_puts_each_worker_on_a_cpu_of_its_own() {
    let (upstream, _) = counting_upstream().await;
    tokio::task::spawn_blocking(move || {
        let process = allowed_cpus("/proc/self/status").unwrap();
        let in_turn = |index: usize| process[index % process.len()];

        let (mut pinned, banner) = start_proxy(upstream, &["--pin-workers"]);
        let said = format!(
            "2 worker thread(s) pinned to CPUs {}, {};",
            in_turn(0),
            in_turn(1)
        );
        let expected = vec![vec![in_turn(0)], vec![in_turn(1)]];
        let cpus = worker_cpus(pinned.id(), 2, &expected);
        let status = get_status(listening_on(&banner), "/", &[]);
        let _ = pinned.kill();
        let _ = pinned.wait();
        assert!(banner.contains(&said), "{banner}");
        assert_eq!(cpus, expected);
        assert_eq!(status, 200);

        let (mut anywhere, banner) = start_proxy(upstream, &[]);
        let expected = vec![process.clone(), process.clone()];
        let cpus = worker_cpus(anywhere.id(), 2, &expected);
        let status = get_status(listening_on(&banner), "/", &[]);
        let _ = anywhere.kill();
        let _ = anywhere.wait();
        assert!(banner.contains("2 worker thread(s);"), "{banner}");
        assert_eq!(cpus, expected);
        assert_eq!(status, 200);
    })
    .await
    .unwrap();
}
