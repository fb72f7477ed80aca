//! All or nothing across the clients of one request (see the parent
//! module's docs): look at every client, then use them, and give back what
//! was used when one refuses after all.

use std::sync::{Mutex, PoisonError};

use futures_util::future::join_all;
use tollgate::{PlanDecision, Returnable};
use tonic::Status;

use super::{Group, RlsService, Verdict};
use crate::taken::Taken;

impl RlsService {
    /// Several groups, all or nothing (see the parent module's docs): step
    /// 1 looks at every group, step 2 consumes, first from the groups
    /// without room (each refuses, consuming nothing, with its exact wait)
    /// and, if none refused, from the rest; the calls of each step at once.
    /// When one refuses in step 2 after all (the state changed since the
    /// look: another instance, or the store failed and its failure policy
    /// refused), what the others consumed is given back.
    pub(super) async fn decide_together(
        &self,
        groups: &[Group],
        costs: &[u32],
        now: u64,
    ) -> Result<Vec<Verdict>, Status> {
        let looks = join_all(groups.iter().map(|group| self.store_check(group, now, 0)));
        let looks = (looks.await.into_iter())
            .map(|look| look.map(|look| look.decision))
            .collect::<Result<Vec<_>, _>>()?;
        let (crowded, roomy): (Vec<usize>, Vec<usize>) =
            (0..groups.len()).partition(|&i| !has_room(costs[i], &looks[i]));
        let taken = Mutex::new(Taken::new(self.config.store.clone()));
        let mut decided: Vec<Option<PlanDecision>> = (0..groups.len()).map(|_| None).collect();
        let mut used = self.use_all(groups, costs, &crowded, now, &taken).await;
        if matches!(&used, Ok(uses) if uses.iter().all(|(_, d)| d.allowed)) {
            let more = self.use_all(groups, costs, &roomy, now, &taken).await;
            used = used.and_then(|mut uses| {
                more.map(|more| {
                    uses.extend(more);
                    uses
                })
            });
        }
        let taken = taken.into_inner().unwrap_or_else(PoisonError::into_inner);
        let uses = match used {
            Ok(uses) => uses,
            Err(status) => {
                taken.give_back().await;
                return Err(status);
            }
        };
        let mut refused = false;
        for (i, decision) in uses {
            refused |= !decision.allowed;
            decided[i] = Some(decision);
        }
        if refused {
            taken.give_back().await;
        } else {
            taken.keep();
        }
        let verdicts = decided
            .into_iter()
            .zip(looks)
            .map(|(decision, look)| match decision {
                Some(d) if !refused || !d.allowed => Verdict::Decided(d),
                _ => Verdict::Untouched(look),
            });
        let verdicts: Vec<Verdict> = verdicts.collect();
        self.observe(groups, costs, &verdicts);
        Ok(verdicts)
    }

    /// Uses the groups `which` at once (one round trip, or one batch, on
    /// Redis), each receipt kept in `taken` as soon as its answer comes, so
    /// that a request abandoned half way gives it back. The first error
    /// fails them all (what the others used is in `taken`).
    async fn use_all(
        &self,
        groups: &[Group],
        costs: &[u32],
        which: &[usize],
        now: u64,
        taken: &Mutex<Taken>,
    ) -> Result<Vec<(usize, PlanDecision)>, Status> {
        let uses = which.iter().map(|&i| async move {
            let Returnable { decision, receipt } =
                self.store_check(&groups[i], now, costs[i]).await?;
            (taken.lock().unwrap_or_else(PoisonError::into_inner)).push(receipt);
            Ok((i, decision))
        });
        join_all(uses).await.into_iter().collect()
    }

    /// Tells the observer what the store decided for each group (those
    /// left untouched, or given back, were not decided).
    fn observe(&self, groups: &[Group], costs: &[u32], verdicts: &[Verdict]) {
        let Some(observer) = &self.config.observer else {
            return;
        };
        for ((group, cost), verdict) in groups.iter().zip(costs).zip(verdicts) {
            if let Verdict::Decided(decision) = verdict {
                observer.decided(&group.plan, &group.key, *cost, decision);
            }
        }
    }

    /// One store call that keeps a receipt of what it consumed; reported to
    /// the observer only if it fails.
    async fn store_check(&self, group: &Group, now: u64, cost: u32) -> Result<Returnable, Status> {
        let answer = (self.config.store)
            .check_returnable(&group.plan, &group.key, now, cost)
            .await;
        answer.map_err(|error| self.failed(group, &error))
    }
}

/// Whether a group's look (cost 0) leaves room for its cost in every
/// enforced limit.
fn has_room(cost: u32, look: &PlanDecision) -> bool {
    look.allowed
        && (look.limits.iter())
            .filter(|l| !l.shadow)
            .all(|l| l.decision.remaining >= cost)
}
