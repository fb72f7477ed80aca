//! [`CachedStore`]: any [`Store`] with a [`RejectionCache`] in front.

use std::sync::Arc;

use tollgate::{
    GivenBack, Inspection, Plan, PlanDecision, Receipt, Returnable, Store, StoreFuture,
};

use crate::{Lookup, RejectionCache};

/// `inner` behind a rejection cache: a request the cache can answer
/// exactly never reaches `inner`; every other one does, and the store's
/// rejections are remembered.
///
/// Put it outside a `tollgate_guard::GuardedStore`, never inside: then the
/// failure policy's answers (marked `decided_by` fail-open, fail-closed or
/// local-fallback) pass through it and are never remembered, since only the
/// store's own rejections prove anything. Several `CachedStore`s may share
/// one cache (e.g. two guards with different failure policies over one
/// Redis connection).
pub struct CachedStore<S> {
    inner: S,
    cache: Arc<RejectionCache>,
}

impl<S> CachedStore<S> {
    /// `inner` behind `cache`.
    pub fn new(inner: S, cache: Arc<RejectionCache>) -> Self {
        Self { inner, cache }
    }

    /// The cache, for metrics and for dropping a changed plan's entries.
    pub fn cache(&self) -> &Arc<RejectionCache> {
        &self.cache
    }

    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// What the cache makes of a request at the caller's `now_ms`.
enum Asked {
    /// The cache's answer.
    Answered(PlanDecision),
    /// The store's to decide at `store_ms`; its answer is remembered at
    /// `cache_ms`, the cache's time for the request.
    Store { cache_ms: u64, store_ms: u64 },
}

impl<S> CachedStore<S> {
    /// Looks the request up at the cache's time: the caller's, or the
    /// cache's own clock's ([`RejectionCache::on_own_clock`]), where the
    /// store keeps the caller's time (it reads a clock of its own).
    fn ask(&self, plan: &Plan, client: &str, now_ms: u64, cost: u32) -> Asked {
        let own = self.cache.own_now_ms();
        match self.cache.lookup(plan, client, own.unwrap_or(now_ms), cost) {
            Lookup::Answered(decision) => Asked::Answered(decision),
            Lookup::AskStore { now_ms: cache_ms } => Asked::Store {
                cache_ms,
                store_ms: if own.is_some() { now_ms } else { cache_ms },
            },
        }
    }
}

impl<S: Store> Store for CachedStore<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        let (cache_ms, store_ms) = match self.ask(plan, client, now_ms, cost) {
            Asked::Answered(decision) => return StoreFuture::ready(Ok(decision)),
            Asked::Store { cache_ms, store_ms } => (cache_ms, store_ms),
        };
        StoreFuture::new(async move {
            let call = self.cache.begin_call(client);
            let decision = self.inner.check(plan, client, store_ms, cost).await?;
            (self.cache).remember_call(plan, client, cache_ms, cost, &decision, &call);
            Ok(decision)
        })
    }

    /// A cached rejection consumed nothing and has no receipt; the
    /// store's answers are remembered as [`Store::check`]'s are.
    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        let (cache_ms, store_ms) = match self.ask(plan, client, now_ms, cost) {
            Asked::Answered(decision) => return StoreFuture::ready(Ok(decision.into())),
            Asked::Store { cache_ms, store_ms } => (cache_ms, store_ms),
        };
        StoreFuture::new(async move {
            let call = self.cache.begin_call(client);
            let returnable = (self.inner)
                .check_returnable(plan, client, store_ms, cost)
                .await?;
            let decision = &returnable.decision;
            (self.cache).remember_call(plan, client, cache_ms, cost, decision, &call);
            Ok(returnable)
        })
    }

    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        self.inner.give_back(receipt)
    }

    fn settle(&self, within: std::time::Duration) -> StoreFuture<'_, ()> {
        self.inner.settle(within)
    }

    /// Always the store's own reading (the cache knows rejections, not
    /// states, and an inspection changes nothing it could remember), at
    /// the latest time the cache holds for the client when later (on the
    /// cache's own clock, at the caller's: the store reads its own).
    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        let now_ms = match self.cache.own_now_ms() {
            Some(_) => now_ms,
            None => self.cache.time_for(client, now_ms),
        };
        self.inner.inspect(plan, client, now_ms)
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        self.inner.failure_domain(client)
    }

    /// The cache's answer, when it has one: only refusals are remembered.
    fn remembered_refusal(
        &self,
        plan: &Plan,
        client: &str,
        now_ms: u64,
        cost: u32,
    ) -> Option<PlanDecision> {
        match self.ask(plan, client, now_ms, cost) {
            Asked::Answered(refusal) => Some(refusal),
            Asked::Store { .. } => None,
        }
    }
}
