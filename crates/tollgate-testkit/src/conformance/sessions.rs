//! Sessions in the replay format (`new POLICY LIMIT WINDOW_MS`,
//! `allow CLIENT NOW_MS`, `remaining CLIENT NOW_MS`), run on a store through
//! the [`Store`] trait: the worked sessions of the contract and the edge
//! cases of the core issue, each with answers written down by hand.
//!
//! [`Store`]: tollgate::Store

use tollgate::{AnyPolicy, Limit, Plan};

use super::{block_on, same_as_naive, MakeStore};
use crate::reference::NaiveStore;

/// The worked sessions (`examples/NAME.replay`) and their expected output
/// (`examples/NAME.expected`).
const WORKED: &[(&str, &str, &str)] = &[
    (
        "session1",
        include_str!("../../../../examples/session1.replay"),
        include_str!("../../../../examples/session1.expected"),
    ),
    (
        "session2",
        include_str!("../../../../examples/session2.replay"),
        include_str!("../../../../examples/session2.expected"),
    ),
    (
        "gcra",
        include_str!("../../../../examples/gcra.replay"),
        include_str!("../../../../examples/gcra.expected"),
    ),
];

/// The edge cases of the core issue: what, session, hand-computed output.
pub const EDGE_CASES: &[(&str, &str, &str)] = &[
    (
        "limit 1, a request at exactly now - window",
        "new sliding-window 1 1000\nallow a 0\nallow a 999\nremaining a 999\nallow a 1000\nremaining a 1999\nremaining a 2000\n",
        "ok\ntrue\nfalse\n0\ntrue\n0\n1\n",
    ),
    (
        "remaining anchors the bucket; a full bucket wastes drips",
        "new token-bucket 2 1000\nremaining b 100\nallow b 550\nallow b 560\nallow b 599\nallow b 600\nremaining b 1099\nremaining b 1100\nremaining b 5000\nallow b 5000\nallow b 5001\nallow b 5002\nremaining b 5099\nremaining b 5100\n",
        "ok\n2\ntrue\ntrue\nfalse\ntrue\n0\n1\n2\ntrue\ntrue\nfalse\n0\n1\n",
    ),
    (
        "GCRA near 2x10^12, then a time going backwards",
        "new gcra 2 1000\nallow c 1999999999000\nallow c 1999999999000\nallow c 1999999999000\nremaining c 1999999999499\nremaining c 1999999999500\nremaining c 2000000000000\nallow c 999999999000\nremaining c 999999999000\n",
        "ok\ntrue\ntrue\nfalse\n0\n1\n2\ntrue\n1\n",
    ),
    (
        "a gap of 10^12 ms in the sliding log",
        "new sliding-window 2 1000\nallow d 1000\nallow d 1000\nallow d 1000\nremaining d 1000000001000\nallow d 1000000001000\nremaining d 5\n",
        "ok\ntrue\ntrue\nfalse\n2\ntrue\n1\n",
    ),
    (
        "a gap of 10^12 ms in the token bucket",
        "new token-bucket 3 3000\nallow e 7\nallow e 7\nallow e 7\nallow e 8\nremaining e 1000000000007\nallow e 1000000000007\nremaining e 1000000000007\n",
        "ok\ntrue\ntrue\ntrue\nfalse\n3\ntrue\n2\n",
    ),
    (
        "a time going backwards is answered at the latest time",
        "new sliding-window 2 1000\nallow f 5000\nallow f 100\nallow f 200\nremaining f 5999\nremaining f 6000\n",
        "ok\ntrue\ntrue\nfalse\n0\n2\n",
    ),
    (
        "client ids that look like key syntax stay separate clients",
        "new sliding-window 1 1000\nallow {x} 0\nallow {x} 1\nallow x 1\nallow %7Bx%7D 1\nallow : 1\nallow :seen 1\nallow \u{e9} 1\nallow \u{e9} 2\nallow } 2\n",
        "ok\ntrue\nfalse\ntrue\ntrue\ntrue\ntrue\ntrue\nfalse\ntrue\n",
    ),
    (
        "each new starts afresh; a failed new stops the calls",
        "new sliding-window 1 1000\nallow g 0\nnew sliding-window 1 1000\nallow g 0\nnew token-bucket 2 999\nallow g 1\nnew gcra 1 10\nallow g 0\nallow g 9\nallow g 10\n",
        "ok\ntrue\nok\ntrue\nerror: line 5: token-bucket needs the window (999 ms) to be a multiple of the limit (2) so that one token drips back every whole millisecond interval\nerror: line 6: no limiter: the `new` on line 5 failed\nok\ntrue\nfalse\ntrue\n",
    ),
];

/// The worked sessions: the store's output must be the expected file's,
/// and every decision the naive model's.
pub fn worked_sessions(make_store: &dyn MakeStore) {
    for (name, session, expected) in WORKED {
        let got = block_on(run_session(make_store, session));
        assert_eq!(&got, expected, "worked session {name}");
    }
}

/// The edge cases ([`EDGE_CASES`]), each against its hand-computed output.
pub fn edge_cases(make_store: &dyn MakeStore) {
    for (what, session, expected) in EDGE_CASES {
        let got = block_on(run_session(make_store, session));
        assert_eq!(&got, expected, "edge case: {what}\nsession:\n{session}");
    }
}

/// The session's current limiter: a one-limit plan on a fresh store, or the
/// number of the line whose `new` failed (0 before any `new`).
type Active = Result<(Plan, std::sync::Arc<dyn tollgate::Store>, NaiveStore), u64>;

/// Runs a session in the replay format on fresh stores from `make_store`
/// (a fresh one for every `new`) and returns its output, one line per call
/// as `tollgate replay` prints it. Every decision is also compared, with all
/// its numbers, with the naive reference's.
///
/// # Panics
/// On a malformed line (the suite's sessions are well-formed), a store
/// error, or a decision that differs from the naive model's.
pub async fn run_session(make_store: &dyn MakeStore, session: &str) -> String {
    let mut active: Active = Err(0);
    let mut output = String::new();
    for (index, line) in session.lines().enumerate() {
        let number = index as u64 + 1;
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let answer = match fields.as_slice() {
            [] => continue,
            [first, ..] if first.starts_with('#') => continue,
            ["new", policy, limit, window] => {
                let built = AnyPolicy::from_name(policy, parse(limit), parse(window));
                match built {
                    Ok(policy) => {
                        let limit = Limit::new("limit", policy, false);
                        let plan = Plan::new("session", vec![limit]).expect("a one-limit plan");
                        active = Ok((plan, make_store.fresh().await, NaiveStore::new()));
                        Ok("ok".to_owned())
                    }
                    Err(e) => {
                        active = Err(number);
                        Err(e.to_string())
                    }
                }
            }
            [verb @ ("allow" | "remaining"), client, now] => match &active {
                Ok((plan, store, naive)) => {
                    let cost = u32::from(*verb == "allow");
                    let context = || format!("line {number}: {line}\nsession:\n{session}");
                    let question = (plan, *client, parse(now), cost);
                    let decision = same_as_naive(&**store, naive, question, &context).await;
                    Ok(if cost == 1 {
                        decision.allowed.to_string()
                    } else {
                        decision.limits[0].decision.remaining.to_string()
                    })
                }
                Err(0) => Err("no limiter yet".to_owned()),
                Err(failed) => Err(format!("no limiter: the `new` on line {failed} failed")),
            },
            _ => panic!("line {number} is not a call the suite knows: {line:?}"),
        };
        match answer {
            Ok(answer) => output.push_str(&answer),
            Err(message) => output.push_str(&format!("error: line {number}: {message}")),
        }
        output.push('\n');
    }
    output
}

/// A number field of a well-formed session.
fn parse<T: std::str::FromStr>(field: &str) -> T {
    field
        .parse()
        .unwrap_or_else(|_| panic!("{field:?} is not a number"))
}
