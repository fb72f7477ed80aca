//! A call's reply as its caller gets it once the replicas it asked for
//! acknowledged it, or not ([`crate::replicas`]).

use std::sync::Arc;

use super::refund::Refund;
use super::{Call, CallReply, Scripts};
use crate::replicas::{Acked, ReplicaWait};
use crate::RedisStoreError;

/// The strictest `WAIT` any of `calls` asks for (a batch carries the calls
/// of stores that share a queue, whatever their own setting).
pub(crate) fn strictest<'a>(calls: impl IntoIterator<Item = &'a Call>) -> Option<ReplicaWait> {
    calls
        .into_iter()
        .filter_map(|call| call.wait)
        .max_by_key(|wait| (wait.replicas, wait.timeout_ms))
}

impl Acked {
    /// `reply` to `call` as its caller gets it: unchanged unless the call
    /// asked for replicas, consumed, and fewer acknowledged it, in which
    /// case its consumption is taken back (a refund is queued) and the
    /// caller gets [`RedisStoreError::NotReplicated`] (or, when Redis
    /// refused the `WAIT`, its refusal). Must be called inside a Tokio
    /// runtime.
    pub(crate) fn answer(&self, scripts: &Arc<Scripts>, call: &Call, reply: Vec<i64>) -> CallReply {
        let Some(wait) = call.wait else {
            return Ok(reply);
        };
        let error = match self {
            Acked::NotAsked => return Ok(reply),
            Acked::Replicas(acknowledged) if *acknowledged >= u64::from(wait.replicas) => {
                return Ok(reply)
            }
            Acked::Replicas(acknowledged) => RedisStoreError::NotReplicated {
                acknowledged: *acknowledged,
                replicas: wait.replicas,
                timeout_ms: wait.timeout_ms,
            },
            Acked::Refused(refusal) => RedisStoreError::Redis(refusal.clone()),
        };
        let Some(refund) = Refund::of(call, &reply) else {
            return Ok(reply);
        };
        scripts.refunds.push(scripts, refund);
        scripts.count_not_replicated();
        Err(error)
    }
}
