//! The refund of a call read from its reply, and what is left of a refund
//! partly restored.

use super::*;

/// The receipt id of the calls here.
const RECEIPT: Arg = Arg::Receipt { tag: 0xab, seq: 7 };

/// A call of two limits (sliding window, GCRA) at cost 3.
fn call(cost: u64) -> Call {
    Call {
        keys: vec![
            "p:{c:a}:seen".into(),
            "p:{c:a}:1".into(),
            "p:{c:a}:2".into(),
        ],
        args: vec![
            Arg::Number(1_000),
            Arg::Number(cost),
            Arg::Number(60_000),
            Arg::Number(9_999),
            Arg::Text("s"),
            Arg::Number(10),
            Arg::Number(1_000),
            Arg::Text("0"),
            Arg::Text("g"),
            Arg::Number(5),
            Arg::Number(500),
            Arg::Text("1"),
            RECEIPT,
            Arg::Number(5),
        ],
        wait: None,
        open: None,
    }
}

#[test]
fn a_refund_takes_back_only_the_limits_the_call_consumed_from() {
    // Allowed; limit 2 (a shadow) refused, so it consumed nothing.
    let reply = [7, 1_000, 1, 1, 7, 0, 1_000, 0, 0, -1, 0, 3, 3, 0, 0];
    let refund = Refund::of(&call(3), &reply).expect("a refund");
    assert_eq!(refund.client, "p:{c:a}:seen");
    assert_eq!(refund.call.keys, vec!["p:{c:a}:1".to_owned()]);
    assert_eq!(
        refund.call.args,
        vec![
            Arg::Number(1_000),
            Arg::Number(3),
            RECEIPT,
            Arg::Text("s"),
            Arg::Number(10),
            Arg::Number(1_000),
            Arg::Signed(3),
            Arg::Signed(3),
            Arg::Number(1),
        ]
    );
}

#[test]
fn nothing_to_take_back_from_a_call_that_consumed_nothing() {
    let consumed = [7, 1_000, 1, 1, 7, 0, 1_000, 1, 2, 0, 200, 3, 3, -1, 0];
    assert!(Refund::of(&call(3), &consumed).is_some());
    // Refused: no undo numbers, and allowed 0.
    let refused = [7, 1_000, 0, 0, 0, 500, 900, 1, 2, 0, 200];
    assert_eq!(Refund::of(&call(3), &refused), None);
    // Late: the script wrote nothing.
    assert_eq!(Refund::of(&call(3), &[7, -1]), None);
    // Only asking (cost 0): no undo numbers.
    let asked = [7, 1_000, 1, 1, 10, 0, 0, 1, 5, 0, 0];
    assert_eq!(Refund::of(&call(0), &asked), None);
    // A reply that does not add up is no refund.
    assert_eq!(Refund::of(&call(3), &consumed[..14]), None);
    // Nor a call without its receipt id: the refund could not find it.
    let mut unmarked = call(3);
    unmarked.args[12] = Arg::Number(1);
    assert_eq!(Refund::of(&unmarked, &consumed), None);
}

#[test]
fn a_refund_holds_its_calls_receipt_open_until_it_ends() {
    let receipts = std::sync::Arc::new(crate::receipts::Receipts::new());
    let (open, _) = receipts.open(0);
    let mut call = call(3);
    call.args[12] = open.arg();
    call.open = Some(open);
    let consumed = [7, 1_000, 1, 1, 7, 0, 1_000, 1, 2, 0, 200, 3, 3, -1, 0];
    let refund = Refund::of(&call, &consumed).expect("a refund");
    assert_eq!(refund.call.args[2], call.args[12], "its receipt id");
    // The reply read (the call dropped): the refund still holds it.
    drop(call);
    assert_eq!(receipts.open(0).1, 1, "still open");
    let mut left = refund.partly(&[0, 1]);
    drop(refund);
    assert_eq!(receipts.open(0).1, 1, "what is left of it holds it too");
    // Kept to be tried again after a stale result, it lets go.
    left.let_go_of_receipt();
    assert_eq!(receipts.open(0).1, 4, "closed once kept");
    drop(left);
}

#[test]
fn a_partly_restored_refund_keeps_the_limits_left() {
    let consumed = [7, 1_000, 1, 1, 7, 0, 1_000, 1, 2, 0, 200, 3, 3, -1, 0];
    let refund = Refund::of(&call(3), &consumed).expect("a refund");
    let left = refund.partly(&[1, 0]);
    assert_eq!(left.call.keys, vec!["p:{c:a}:2".to_owned()]);
    assert_eq!(
        left.call.args,
        vec![
            Arg::Number(1_000),
            Arg::Number(3),
            RECEIPT,
            Arg::Text("g"),
            Arg::Number(5),
            Arg::Number(500),
            Arg::Signed(-1),
            Arg::Signed(0),
            Arg::Number(2),
        ]
    );
}
