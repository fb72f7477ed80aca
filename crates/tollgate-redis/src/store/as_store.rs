//! [`RedisStore`] behind the async boundary that every front end talks to
//! ([`tollgate::Store`]): each method the store's own, its errors turned
//! into [`StoreError`]s marked transient or not.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    GivenBack, Inspection, Plan, PlanDecision, Receipt, Returnable, Store, StoreError, StoreFuture,
};

use super::RedisStore;
use crate::call::refund::{self, Refund};
use crate::masters::Queues;

impl Store for RedisStore {
    /// On a cluster, the master serving the client's slot by the store's
    /// map of slots (`None` before the first reading); on one node, `None`.
    fn failure_domain(&self, client: &str) -> Option<Arc<str>> {
        let Some(Queues::Masters(masters)) = &self.queues else {
            return None;
        };
        masters.master_of(&self.keys.client_base(client))
    }

    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::new(async move {
            self.decide(plan, client, now_ms, cost)
                .await
                .map_err(Into::into)
        })
    }

    /// The receipt holds the call's refund: the undo numbers of its
    /// script's reply ([`crate::call::refund`]).
    fn check_returnable<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, Returnable> {
        StoreFuture::new(async move {
            let (decision, refund) = self
                .decide_keeping(plan, client, now_ms, cost, true)
                .await?;
            Ok(Returnable {
                decision,
                receipt: refund.map(Receipt::new),
            })
        })
    }

    /// Sends the receipt's refund at once, in a task that finishes it even
    /// when the caller stops waiting ([`crate::call::refund`]'s rules: compare
    /// and restore, counted with the refunds).
    fn give_back(&self, receipt: Receipt) -> StoreFuture<'_, GivenBack> {
        StoreFuture::new(async move {
            let refund = receipt.into_inner::<Refund>().map_err(|_| {
                StoreError::permanent("a receipt that another store issued was handed to Redis")
            })?;
            Ok(refund::give_back(&self.scripts, refund).await?)
        })
    }

    fn settle(&self, within: Duration) -> StoreFuture<'_, ()> {
        StoreFuture::new(async move { Ok(RedisStore::settle(self, within).await?) })
    }

    fn inspect<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Inspection> {
        StoreFuture::new(async move {
            RedisStore::inspect(self, plan, client, now_ms)
                .await
                .map_err(Into::into)
        })
    }
}
