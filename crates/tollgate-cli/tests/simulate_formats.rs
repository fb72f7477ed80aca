//! `tollgate simulate` against an independent computation: the same
//! requests, put in time order by the test and decided by
//! `tollgate::PlanLimiter` directly, must give the summary the binary prints,
//! in every log format; malformed lines are counted with their numbers.

mod simulate_common;

use simulate_common::*;

#[test]
fn combined_logs_give_the_limiters_numbers() {
    let requests = traffic(3000, 1000, 1000);
    let (text, bad) = with_malformed(
        None,
        requests.iter().map(|(client, ms)| {
            let time = chrono::DateTime::from_timestamp_millis(*ms as i64).unwrap();
            format!(
                r#"{client} - - [{}] "GET /x HTTP/1.1" 200 5 "-" "t/1""#,
                time.format("%d/%b/%Y:%H:%M:%S +0000")
            )
        }),
        "garbage",
    );
    let dir = Dir::new();
    let log = dir.write("access.log", &text);
    let (summary, stderr) = dir.simulate_json(&[&log]);
    assert!(
        summary.rejected > 50 && summary.plans["paid"]["burst"].rejected > 0,
        "{summary:?}"
    );
    assert_eq!(summary, expected(&requests, bad.len() as u64));
    check_malformed(&stderr, &log, &bad);
}

#[test]
fn json_lines_with_every_time_form_give_the_limiters_numbers() {
    let requests = traffic(3000, 300, 1);
    let (text, bad) = with_malformed(
        None,
        requests
            .iter()
            .enumerate()
            .map(|(i, (client, ms))| match i % 3 {
                0 => format!(r#"{{"who":"{client}","path":"/x","at":{ms}}}"#),
                1 => format!(r#"{{"at":"{}","who":"{client}"}}"#, rfc3339(*ms)),
                _ => format!(
                    r#"{{"at":{}.{:03},"who":"{client}"}}"#,
                    ms / 1000,
                    ms % 1000
                ),
            }),
        r#"{"who":"c1"}"#,
    );
    let dir = Dir::new();
    let log = dir.write("access.jsonl", &text);
    let (summary, stderr) =
        dir.simulate_json(&["--format", "json", "--client", "who", "--time", "at", &log]);
    assert_eq!(summary, expected(&requests, bad.len() as u64));
    check_malformed(&stderr, &log, &bad);
    assert!(stderr.contains("no key \"at\""), "{stderr}");
}

#[test]
fn csv_logs_merged_from_two_files_give_the_limiters_numbers() {
    let requests = traffic(3000, 300, 1);
    // Alternate lines go to two files; the merge puts them back in time
    // order, ties to the file named first.
    let mut files: [Vec<(usize, &(String, u64))>; 2] = [Vec::new(), Vec::new()];
    for (i, request) in requests.iter().enumerate() {
        files[(i / 7) % 2].push((i, request));
    }
    let dir = Dir::new();
    let mut logs = Vec::new();
    let mut all_bad = Vec::new();
    for (n, file) in files.iter().enumerate() {
        let (text, bad) = with_malformed(
            Some("time,path,client"),
            file.iter()
                .map(|(_, (client, ms))| format!("{},\"/a,b\",{client}", rfc3339(*ms))),
            "1764669600000,\"unclosed,c1",
        );
        logs.push(dir.write(&format!("log{n}.csv"), &text));
        all_bad.push(bad);
    }
    let mut ordered: Vec<(u64, usize, usize, String)> = files
        .iter()
        .enumerate()
        .flat_map(|(n, file)| file.iter().map(move |(i, (c, ms))| (*ms, n, *i, c.clone())))
        .collect();
    ordered.sort();
    let in_order: Vec<(String, u64)> = ordered.into_iter().map(|(ms, _, _, c)| (c, ms)).collect();
    let (summary, stderr) = dir.simulate_json(&["--format", "csv", &logs[0], &logs[1]]);
    let malformed = (all_bad[0].len() + all_bad[1].len()) as u64;
    assert_eq!(summary, expected(&in_order, malformed));
    check_malformed(&stderr, &logs[0], &all_bad[0]);
    check_malformed(&stderr, &logs[1], &all_bad[1]);
}
