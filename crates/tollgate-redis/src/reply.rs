//! The plan script's reply, read into the core's decision.

use tollgate::{Decision, LimitDecision, Plan, PlanDecision, Policy};

use crate::RedisStoreError;

/// Builds the decision from the script's reply after its Redis time:
/// `now_used, allowed`, then four numbers per limit.
pub(crate) fn read_reply(plan: &Plan, reply: &[i64]) -> Result<PlanDecision, RedisStoreError> {
    let limits = plan.limits();
    // Two undo numbers per limit follow when the call consumed (for a
    // refund, should its caller have given up).
    let reply = match reply.get(1) {
        Some(1) if reply.len() == 2 + 6 * limits.len() => &reply[..2 + 4 * limits.len()],
        _ => reply,
    };
    if reply.len() != 2 + 4 * limits.len() {
        return Err(RedisStoreError::Reply(format!(
            "{} numbers for {} limits",
            reply.len(),
            limits.len()
        )));
    }
    let number = |value: i64, what: &str| {
        u64::try_from(value).map_err(|_| RedisStoreError::Reply(format!("negative {what} {value}")))
    };
    let mut decisions = Vec::with_capacity(limits.len());
    for (limit, fields) in limits.iter().zip(reply[2..].chunks_exact(4)) {
        let remaining = u32::try_from(fields[1])
            .map_err(|_| RedisStoreError::Reply(format!("remaining {} out of range", fields[1])))?;
        let retry_after_ms = match fields[2] {
            -1 => None,
            value => Some(number(value, "retry_after_ms")?),
        };
        decisions.push(LimitDecision {
            name: limit.name().into(),
            policy: limit.policy().name(),
            window_ms: limit.policy().window_ms(),
            shadow: limit.is_shadow(),
            decision: Decision {
                allowed: fields[0] == 1,
                limit: limit.policy().limit(),
                remaining,
                retry_after_ms,
                reset_after_ms: number(fields[3], "reset_after_ms")?,
            },
        });
    }
    let decision = PlanDecision::from_limits(decisions);
    if decision.allowed != (reply[1] == 1) {
        return Err(RedisStoreError::Reply(
            "the script's overall answer disagrees with its limits".into(),
        ));
    }
    Ok(decision)
}
