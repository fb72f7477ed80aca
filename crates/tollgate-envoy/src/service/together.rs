//! All or nothing across the clients of one request (see the parent
//! module's docs): look at every client, then use them, and give back what
//! was used when one refuses after all.

use std::sync::{Mutex, PoisonError};

use futures_util::future::join_all;
use tollgate::{DecidedBy, PlanDecision, Returnable};
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
    ///
    /// A store error fails the request (`UNAVAILABLE`, for Envoy's failure
    /// mode) only when no client refused: a client certainly over its
    /// limit refuses the request whatever the store says of the others,
    /// as an error would let Envoy's default failure mode admit it (a
    /// caller adding a descriptor of a client on a failing Redis master
    /// would skip a spent limit). A client whose call failed is then
    /// reported as its look left it, without numbers when the look failed.
    /// (A client whose look showed no room but whose use then failed is
    /// not counted as refusing: its store failed between the two steps.)
    pub(super) async fn decide_together(
        &self,
        groups: &[Group],
        costs: &[u32],
        now: u64,
    ) -> Result<Vec<Verdict>, Status> {
        let looks = join_all(groups.iter().map(|group| self.store_check(group, now, 0)));
        let looks: Vec<Result<PlanDecision, Status>> = (looks.await.into_iter())
            .map(|look| look.map(|look| look.decision))
            .collect();
        let taken = Mutex::new(Taken::new(self.config.store.clone()));
        let uses = self.use_in_turn(groups, costs, &looks, now, &taken).await;
        let taken = taken.into_inner().unwrap_or_else(PoisonError::into_inner);
        let refused = any_refused(&uses);
        match first_error(&uses) {
            Some(error) if !refused => {
                let error = error.clone();
                taken.give_back().await;
                return Err(error);
            }
            _ if refused => taken.give_back().await,
            _ => taken.keep(),
        }
        let mut decided: Vec<Option<PlanDecision>> = (0..groups.len()).map(|_| None).collect();
        for (i, used) in uses {
            decided[i] = used.ok();
        }
        let verdicts: Vec<Verdict> = (decided.into_iter().zip(looks))
            .map(|(decision, look)| match decision {
                Some(d) if !refused || !d.allowed => Verdict::Decided(d),
                _ => Verdict::Untouched(
                    look.unwrap_or_else(|_| PlanDecision::from_limits(Vec::new())),
                ),
            })
            .collect();
        self.observe(groups, costs, &verdicts);
        Ok(verdicts)
    }

    /// Step 2: uses the groups without room (by their looks), and then, if
    /// none refused and nothing failed, the rest. A failed look counts as
    /// its group's failed use: it stops the second round, but not a refusal
    /// of the first.
    ///
    /// A group whose look the failure policy answered (fail-open or
    /// fail-closed: its store failing) is answered by the policy at its
    /// cost without a second call, which would wait out the store's
    /// timeout again while the request holds its clients' locks; a refusal
    /// among them refuses the request before anything is used. Before the
    /// policy, such a group, or one whose look failed, is refused if the
    /// store remembers refusing it ([`tollgate::Store::remembered_refusal`]:
    /// the rejection cache): its look, of cost 0, was below what the cache
    /// answers, and the failure policy would have let a client known to be
    /// over its limit through (an audit, with a real Envoy and fail-open).
    async fn use_in_turn(
        &self,
        groups: &[Group],
        costs: &[u32],
        looks: &[Result<PlanDecision, Status>],
        now: u64,
        taken: &Mutex<Taken>,
    ) -> Vec<(usize, Result<PlanDecision, Status>)> {
        let remembered: Vec<(usize, Result<PlanDecision, Status>)> = (0..groups.len())
            .filter(|&i| store_failed(&looks[i]))
            .filter_map(|i| {
                let group = &groups[i];
                let store = &self.config.store;
                let refusal = store.remembered_refusal(&group.plan, &group.key, now, costs[i])?;
                Some((i, Ok(refusal)))
            })
            .collect();
        if !remembered.is_empty() {
            return remembered;
        }
        let mut uses: Vec<(usize, Result<PlanDecision, Status>)> = (0..groups.len())
            .filter_map(|i| {
                let look = looks[i].as_ref().ok()?;
                Some((i, Ok(policy_answer(&groups[i], costs[i], now, look)?)))
            })
            .collect();
        if any_refused(&uses) {
            return uses;
        }
        let answered: Vec<usize> = uses.iter().map(|(i, _)| *i).collect();
        let (crowded, roomy): (Vec<usize>, Vec<usize>) = (0..groups.len())
            .filter(|i| !answered.contains(i))
            .partition(|&i| matches!(&looks[i], Ok(look) if !has_room(costs[i], look)));
        uses.extend(self.use_all(groups, costs, &crowded, now, taken).await);
        if any_refused(&uses) {
            return uses;
        }
        let failed_looks = looks.iter().enumerate();
        uses.extend(
            failed_looks.filter_map(|(i, look)| Some((i, Err(look.as_ref().err()?.clone())))),
        );
        if first_error(&uses).is_none() {
            let roomy_used = self.use_all(groups, costs, &roomy, now, taken).await;
            uses.extend(roomy_used);
        }
        uses
    }

    /// Uses the groups `which` at once (one round trip, or one batch, on
    /// Redis), each receipt kept in `taken` as soon as its answer comes, so
    /// that a request abandoned half way gives it back. Each group's answer
    /// or error, in `which`'s order.
    async fn use_all(
        &self,
        groups: &[Group],
        costs: &[u32],
        which: &[usize],
        now: u64,
        taken: &Mutex<Taken>,
    ) -> Vec<(usize, Result<PlanDecision, Status>)> {
        let uses = which.iter().map(|&i| async move {
            let used = self.store_check(&groups[i], now, costs[i]).await;
            let used = used.map(|Returnable { decision, receipt }| {
                (taken.lock().unwrap_or_else(PoisonError::into_inner)).push(receipt);
                decision
            });
            (i, used)
        });
        join_all(uses).await
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

/// The failure policy's answer to `group` at `cost`, when `look` was that
/// policy's (fail-open or fail-closed; see `use_in_turn`).
fn policy_answer(group: &Group, cost: u32, now: u64, look: &PlanDecision) -> Option<PlanDecision> {
    let DecidedBy::Failure(policy) = look.decided_by else {
        return None;
    };
    let retry_after_ms = look
        .retry_after_ms
        .unwrap_or(tollgate_guard::DEFAULT_FAIL_CLOSED_RETRY_AFTER_MS);
    tollgate_guard::failure_answer(policy, &group.plan, now, cost, retry_after_ms)
}

/// Whether a group's look failed, or its failure policy answered it.
fn store_failed(look: &Result<PlanDecision, Status>) -> bool {
    match look {
        Ok(look) => matches!(look.decided_by, DecidedBy::Failure(_)),
        Err(_) => true,
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

/// Whether a group used refused the request.
fn any_refused(uses: &[(usize, Result<PlanDecision, Status>)]) -> bool {
    uses.iter()
        .any(|(_, used)| matches!(used, Ok(d) if !d.allowed))
}

/// The first error among the groups used, if any.
fn first_error(uses: &[(usize, Result<PlanDecision, Status>)]) -> Option<&Status> {
    uses.iter().find_map(|(_, used)| used.as_ref().err())
}
