//! [`RedisStore`]: plan decisions made by one Lua script in Redis.

use std::sync::Arc;
use std::time::Duration;

use crate::evalsha::LuaScript;
use tollgate::{Inspection, Plan, PlanDecision, Policy};

use crate::bounds;
use crate::call::refund::Refund;
use crate::call::{resend_after, script_error, Arg, Call, CallCounts, Scripts};
use crate::deadline::{self, Offset};
use crate::inspect::read_inspection;
use crate::keys::KeyLayout;
use crate::masters::Queues;
use crate::measure;
use crate::reply::read_reply;
use crate::slots;
use crate::{policies, RedisStoreConfig, RedisStoreError, TimeSource};

mod as_store;
mod connect;
mod permissions;
mod start_up_checks;
pub use start_up_checks::NO_EVICTION;

/// Per-client limit state in Redis, shared by every server using the same
/// Redis and key prefix, with the in-memory limiter's exact answers.
///
/// Each decision is one EVALSHA of [`crate::scripts::PLAN`], which decides every
/// limit of the plan for the client and consumes from all of them or none,
/// atomically; or, when decisions queue up behind calls in flight, one of
/// the decisions of a [`crate::scripts::BATCH`] call (see [`crate::batch`]).
/// Cloning is cheap and shares the connection and the queue.
#[derive(Clone)]
pub struct RedisStore {
    scripts: Arc<Scripts>,
    queues: Option<Queues>,
    inspect_script: Arc<LuaScript>,
    keys: KeyLayout,
    config: RedisStoreConfig,
}

impl RedisStore {
    /// How many decisions this store (and every store sharing its
    /// connection) sent to Redis, in how many script calls: for metrics and
    /// benchmarks (Redis calls per decision).
    pub fn call_counts(&self) -> CallCounts {
        self.scripts.counts()
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.config
    }

    /// The key layout in force.
    pub fn keys(&self) -> &KeyLayout {
        &self.keys
    }

    /// The SHA1 of the plan script, as EVALSHA names it.
    pub fn script_sha(&self) -> &str {
        self.scripts.plan.hash()
    }

    /// Decides a request of `cost` units (0 only asks) for `client` against
    /// every limit of `plan` at `now_ms` (ignored with [`TimeSource::Redis`]),
    /// in one round trip (two when the estimate of Redis's clock is older
    /// than two seconds: see [`crate::deadline`]), shared with the other
    /// decisions that queued up meanwhile (see [`crate::batch`]).
    ///
    /// # Errors
    /// [`RedisStoreError::OutOfRange`] before any call when an argument is
    /// outside the store's exact range ([`crate::bounds`]); Redis errors;
    /// [`RedisStoreError::DeadlinePassed`] when the script started after the
    /// call's deadline (it wrote nothing); [`RedisStoreError::Script`] when
    /// the script refuses its arguments or a stored state;
    /// [`RedisStoreError::Reply`] for a reply it cannot read.
    pub async fn decide(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Result<PlanDecision, RedisStoreError> {
        let (decision, _) = self
            .decide_keeping(plan, client, now_ms, cost, false)
            .await?;
        Ok(decision)
    }

    /// [`RedisStore::decide`], with, when `keep` and the call consumed, the
    /// refund that takes it back ([`Store::give_back`]).
    async fn decide_keeping(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        keep: bool,
    ) -> Result<(PlanDecision, Option<Refund>), RedisStoreError> {
        let clock = &self.scripts.clock;
        let started_us = clock.now_us();
        let caller_time = self.config.time_source == TimeSource::Caller;
        bounds::check(
            plan,
            caller_time.then_some(now_ms),
            self.config.expiry_margin_ms,
        )?;
        let offset_us = match clock.offset_at(started_us, self.config.timeout) {
            Offset::Fresh(offset) => offset,
            Offset::Aging(offset) => {
                measure::in_background(&self.scripts, self.config.timeout);
                offset
            }
            Offset::Unknown => measure::measure_offset_at_home(&self.scripts).await?,
        };
        let deadline_us = deadline::deadline_us(started_us, offset_us, self.config.timeout);
        let mut call = self.call(plan, client, now_ms, cost, deadline_us)?;
        let slot = slots::slot_of(call.keys[0].as_bytes());
        let (open, watermark) = self.scripts.receipts.open(slot);
        call.args.push(open.arg());
        call.args.push(Arg::Number(watermark));
        call.open = Some(open);
        // Only a caller deciding several clients together keeps its call
        // (and so its receipt open, for the refund it may give back).
        let kept = keep.then(|| call.clone());
        let whole = match &self.queues {
            Some(queues) => queues.decide(call).await?,
            None => {
                let connection = &self.scripts.connection;
                self.scripts.one_detached(connection, call).await?
            }
        };
        let (&redis_us, reply) = whole
            .split_first()
            .ok_or_else(|| RedisStoreError::Reply("an empty reply".into()))?;
        let redis_us = u64::try_from(redis_us)
            .map_err(|_| RedisStoreError::Reply(format!("negative Redis time {redis_us}")))?;
        if reply.first() == Some(&-1) {
            return Err(RedisStoreError::DeadlinePassed {
                timeout: self.config.timeout,
                late_by: Duration::from_micros(redis_us.saturating_sub(deadline_us)),
            });
        }
        let decision = read_reply(plan, reply)?;
        Ok((decision, kept.and_then(|call| Refund::of(&call, &whole))))
    }

    /// Waits, for at most `within`, until every call has had its reply
    /// handed over, every lost reply's receipt is claimed and every refund
    /// is sent, so that a process about to exit still takes back what its
    /// abandoned calls consumed (a call answered by the failure policy while
    /// Redis held its reply, or whose reply was lost; see [`crate::call::refund`]
    /// and [`crate::call::lost`]). Checked every 5 ms.
    ///
    /// # Errors
    /// [`RedisStoreError::Unsettled`] when `within` ran out first (Redis
    /// still stopped, say): what is left stays counted.
    pub async fn settle(&self, within: Duration) -> Result<(), RedisStoreError> {
        let started = tokio::time::Instant::now();
        loop {
            let scripts = &self.scripts;
            let calls = scripts.outstanding.count();
            // Lost calls first: their claims queue refunds before they end.
            let claims_or_refunds = !(scripts.lost.is_idle() && scripts.refunds.is_idle());
            if calls == 0 && !claims_or_refunds {
                return Ok(());
            }
            if started.elapsed() >= within {
                return Err(RedisStoreError::Unsettled {
                    calls,
                    claims_or_refunds,
                    within,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `client`'s state under every limit of `plan` at `now_ms` (ignored
    /// with [`TimeSource::Redis`]; the client's later last-seen time when
    /// there is one), in one round trip of [`crate::scripts::INSPECT`], which reads
    /// the stored states and writes nothing. The numbers are computed from
    /// those states by [`tollgate::inspect_plan`], as for the memory store.
    ///
    /// # Errors
    /// As [`RedisStore::decide`], except that there is no deadline to pass:
    /// a read that Redis runs late changes nothing.
    pub async fn inspect(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
    ) -> Result<Inspection, RedisStoreError> {
        let caller_time = self.config.time_source == TimeSource::Caller;
        bounds::check(
            plan,
            caller_time.then_some(now_ms),
            self.config.expiry_margin_ms,
        )?;
        let base = self.keys.client_base(client);
        let limits = plan.limits();
        let mut keys = Vec::with_capacity(1 + limits.len());
        let mut args = Vec::with_capacity(1 + 3 * limits.len());
        keys.push(KeyLayout::seen_key_from_base(&base));
        args.push(self.time_arg(now_ms));
        for limit in limits {
            push_limit(&base, limit, &mut keys, &mut args)?;
        }
        let inspection = Call {
            keys,
            args,
            wait: None,
            open: None,
        };
        let (script, connection) = (self.inspect_script.clone(), self.scripts.connection.clone());
        // At home, as every call of the store (`connection::home`).
        let reply: Vec<i64> = self
            .scripts
            .spawn(async move {
                let invocation = inspection.invocation(&script);
                match connection.invoke(&invocation).await {
                    // Read only: sent once more on a connection found
                    // dropped, as a decision is (`call::resend_after`).
                    Err(e) if resend_after(&connection, &e) => connection.invoke(&invocation).await,
                    answer => answer,
                }
            })
            .await
            .map_err(|_| RedisStoreError::BatchLost)?
            .map_err(script_error)?;
        read_inspection(plan, &reply)
    }

    /// The time argument of a script: `now_ms`, or `redis` to have the
    /// script read Redis's own `TIME` ([`TimeSource::Redis`]).
    fn time_arg(&self, now_ms: u64) -> Arg {
        match self.config.time_source {
            TimeSource::Caller => Arg::Number(now_ms),
            TimeSource::Redis => Arg::Text("redis"),
        }
    }

    /// The script's KEYS and ARGV for one call (see [`scripts`]), but its
    /// receipt id and watermark, which go last.
    fn call(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
        deadline_us: u64,
    ) -> Result<Call, RedisStoreError> {
        let limits = plan.limits();
        let base = self.keys.client_base(client);
        let mut keys = Vec::with_capacity(1 + limits.len());
        let mut args = Vec::with_capacity(6 + 4 * limits.len());
        keys.push(KeyLayout::seen_key_from_base(&base));
        args.push(self.time_arg(now_ms));
        args.push(Arg::Number(u64::from(cost)));
        args.push(Arg::Number(self.config.expiry_margin_ms));
        args.push(Arg::Number(deadline_us));
        for limit in limits {
            push_limit(&base, limit, &mut keys, &mut args)?;
            args.push(Arg::Text(if limit.is_shadow() { "1" } else { "0" }));
        }
        Ok(Call {
            keys,
            args,
            wait: self.config.replica_wait(),
            open: None,
        })
    }
}

/// A limit's state key, and the arguments every script reads for it: the
/// policy's code, the limit and the window.
fn push_limit(
    base: &str,
    limit: &tollgate::Limit,
    keys: &mut Vec<String>,
    args: &mut Vec<Arg>,
) -> Result<(), RedisStoreError> {
    let policy = limit.policy();
    let descriptor = descriptor_of(policy)?;
    keys.push(KeyLayout::limit_key_from_base(
        base,
        limit.id(),
        descriptor.format,
    ));
    args.push(Arg::Text(descriptor.code));
    args.push(Arg::Number(u64::from(policy.limit())));
    args.push(Arg::Number(policy.window_ms()));
    Ok(())
}

/// How the store serves `policy`, or [`RedisStoreError::UnsupportedPolicy`].
fn descriptor_of(
    policy: &tollgate::AnyPolicy,
) -> Result<&'static policies::RedisPolicy, RedisStoreError> {
    policies::by_name(policy.name())
        .ok_or_else(|| RedisStoreError::UnsupportedPolicy(policy.name().to_owned()))
}
