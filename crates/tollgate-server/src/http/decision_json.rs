//! The JSON of a decision, written straight into the response's buffer:
//! the keys are literals, the numbers go through `itoa` and the strings
//! through `serde_json`'s own escaping, so the bytes are exactly what
//! `serde_json` writes for the same fields in the same order (a test
//! compares them), at a fraction of the cost of serializing a struct.

use tollgate::LimitDecision;

/// What the answer says of one decision.
pub(crate) struct DecisionJson<'a> {
    pub allowed: bool,
    pub client: &'a str,
    pub plan: &'a str,
    pub cost: u32,
    pub retry_after_ms: Option<u64>,
    pub decided_by: &'static str,
    pub limits: &'a [LimitDecision],
}

/// Room for a decision's JSON: its fixed part, then each limit's.
const BODY_BYTES: usize = 160;
const LIMIT_BYTES: usize = 192;

impl DecisionJson<'_> {
    /// The JSON object. For a look (`cost` 0), a limit's `allowed` says
    /// whether a request of cost 1 would pass it now.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            BODY_BYTES + self.client.len() + self.plan.len() + LIMIT_BYTES * self.limits.len(),
        );
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(b"{\"allowed\":");
        push_bool(&mut out, self.allowed);
        out.extend_from_slice(b",\"client\":");
        push_str(&mut out, self.client);
        out.extend_from_slice(b",\"plan\":");
        push_str(&mut out, self.plan);
        out.extend_from_slice(b",\"cost\":");
        out.extend_from_slice(number.format(self.cost).as_bytes());
        out.extend_from_slice(b",\"retry_after_ms\":");
        push_option(&mut out, &mut number, self.retry_after_ms);
        out.extend_from_slice(b",\"decided_by\":");
        push_str(&mut out, self.decided_by);
        out.extend_from_slice(b",\"limits\":[");
        for (i, l) in self.limits.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let d = &l.decision;
            out.extend_from_slice(b"{\"name\":");
            push_str(&mut out, &l.name);
            out.extend_from_slice(b",\"policy\":");
            push_str(&mut out, l.policy);
            out.extend_from_slice(b",\"limit\":");
            out.extend_from_slice(number.format(d.limit).as_bytes());
            out.extend_from_slice(b",\"window_ms\":");
            out.extend_from_slice(number.format(l.window_ms).as_bytes());
            out.extend_from_slice(b",\"remaining\":");
            out.extend_from_slice(number.format(d.remaining).as_bytes());
            out.extend_from_slice(b",\"retry_after_ms\":");
            push_option(&mut out, &mut number, d.retry_after_ms);
            out.extend_from_slice(b",\"reset_after_ms\":");
            out.extend_from_slice(number.format(d.reset_after_ms).as_bytes());
            out.extend_from_slice(b",\"allowed\":");
            push_bool(
                &mut out,
                if self.cost == 0 {
                    d.remaining >= 1
                } else {
                    d.allowed
                },
            );
            out.extend_from_slice(b",\"shadow\":");
            push_bool(&mut out, l.shadow);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}

fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn push_option(out: &mut Vec<u8>, number: &mut itoa::Buffer, value: Option<u64>) {
    match value {
        Some(value) => out.extend_from_slice(number.format(value).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string, escaped by `serde_json` (writing to a `Vec` cannot fail).
fn push_str(out: &mut Vec<u8>, value: &str) {
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::sync::Arc;
    use tollgate::Decision;

    /// The answer as it was serialized before: `serde_json` on a struct.
    #[derive(Serialize)]
    struct LimitBody<'a> {
        name: &'a str,
        policy: &'static str,
        limit: u32,
        window_ms: u64,
        remaining: u32,
        retry_after_ms: Option<u64>,
        reset_after_ms: u64,
        allowed: bool,
        shadow: bool,
    }

    #[derive(Serialize)]
    struct DecisionBody<'a> {
        allowed: bool,
        client: &'a str,
        plan: &'a str,
        cost: u32,
        retry_after_ms: Option<u64>,
        decided_by: &'static str,
        limits: Vec<LimitBody<'a>>,
    }

    fn reference(d: &DecisionJson<'_>) -> Vec<u8> {
        let limits = d
            .limits
            .iter()
            .map(|l| LimitBody {
                name: &l.name,
                policy: l.policy,
                limit: l.decision.limit,
                window_ms: l.window_ms,
                remaining: l.decision.remaining,
                retry_after_ms: l.decision.retry_after_ms,
                reset_after_ms: l.decision.reset_after_ms,
                allowed: if d.cost == 0 {
                    l.decision.remaining >= 1
                } else {
                    l.decision.allowed
                },
                shadow: l.shadow,
            })
            .collect();
        serde_json::to_vec(&DecisionBody {
            allowed: d.allowed,
            client: d.client,
            plan: d.plan,
            cost: d.cost,
            retry_after_ms: d.retry_after_ms,
            decided_by: d.decided_by,
            limits,
        })
        .unwrap()
    }

    fn limit(name: &str, remaining: u32, retry: Option<u64>, shadow: bool) -> LimitDecision {
        LimitDecision {
            name: Arc::from(name),
            policy: "sliding-window",
            window_ms: 86_400_000,
            shadow,
            decision: Decision {
                allowed: remaining > 0,
                limit: u32::MAX,
                remaining,
                retry_after_ms: retry,
                reset_after_ms: u64::MAX,
            },
        }
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let limits = [
            limit("1s", 0, Some(999), false),
            limit("d\"a\\y\u{1}é", 7, None, true),
            limit("", 1, Some(0), false),
        ];
        for (limits, cost, retry) in [
            (&limits[..], 1, Some(999)),
            (&limits[..], 0, None),
            (&limits[..1], 4_000_000_000, Some(0)),
            (&limits[..0], 1, Some(0)),
        ] {
            for client in ["alice", "", "b\"q\\\n\u{7f}\u{2028}zoë"] {
                let d = DecisionJson {
                    allowed: cost == 1,
                    client,
                    plan: "pl\tan",
                    cost,
                    retry_after_ms: retry,
                    decided_by: "failure-policy:fail-open",
                    limits,
                };
                assert_eq!(
                    String::from_utf8(d.to_vec()).unwrap(),
                    String::from_utf8(reference(&d)).unwrap()
                );
            }
        }
    }
}
