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

impl<S: Store> Store for CachedStore<S> {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        let now_ms = match self.cache.lookup(plan, client, now_ms, cost) {
            Lookup::Answered(decision) => return StoreFuture::ready(Ok(decision)),
            Lookup::AskStore { now_ms } => now_ms,
        };
        StoreFuture::new(async move {
            let decision = self.inner.check(plan, client, now_ms, cost).await?;
            self.cache.remember(plan, client, now_ms, cost, &decision);
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
        let now_ms = match self.cache.lookup(plan, client, now_ms, cost) {
            Lookup::Answered(decision) => return StoreFuture::ready(Ok(decision.into())),
            Lookup::AskStore { now_ms } => now_ms,
        };
        StoreFuture::new(async move {
            let returnable = (self.inner)
                .check_returnable(plan, client, now_ms, cost)
                .await?;
            (self.cache).remember(plan, client, now_ms, cost, &returnable.decision);
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
    /// the latest time the cache holds for the client when later.
    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        let now_ms = self.cache.time_for(client, now_ms);
        self.inner.inspect(plan, client, now_ms)
    }

    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        self.inner.failure_domain(client)
    }
}
