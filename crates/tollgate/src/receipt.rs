//! Giving back what a check consumed, for a request that several clients
//! decide together: when one of them refuses it, the others' consumption is
//! taken back, so that a refused request consumes nothing.
//!
//! A store that decides one client atomically cannot decide several at
//! once (on a Redis Cluster their keys live on different nodes). A caller
//! that needs all or nothing (the Envoy service, whose request may name the
//! caller's address and its API key) consumes from each client with
//! [`Store::check_returnable`](crate::Store::check_returnable), and when a
//! later client refuses, hands each earlier [`Receipt`] to
//! [`Store::give_back`](crate::Store::give_back).

use std::any::Any;

use crate::plan::PlanDecision;

/// What a store needs to take one consuming check back: opaque outside the
/// store that issued it, which alone knows what it holds (a Redis store,
/// the undo numbers of its script's reply).
pub struct Receipt(Box<dyn Any + Send + Sync>);

impl Receipt {
    /// A receipt holding `what`, for the store that issues it.
    pub fn new<T: Any + Send + Sync>(what: T) -> Self {
        Self(Box::new(what))
    }

    /// What the receipt holds, when it is a `T` (a receipt of this store).
    ///
    /// # Errors
    /// The receipt itself, when it holds something else (a receipt of
    /// another store).
    pub fn into_inner<T: Any>(self) -> Result<T, Self> {
        match self.0.downcast::<T>() {
            Ok(what) => Ok(*what),
            Err(other) => Err(Self(other)),
        }
    }
}

impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receipt")
    }
}

/// A decision, and the receipt of what it consumed when the store can give
/// that back: what [`Store::check_returnable`](crate::Store::check_returnable)
/// answers.
#[derive(Debug)]
pub struct Returnable {
    /// The decision, as [`Store::check`](crate::Store::check) answers it.
    pub decision: PlanDecision,
    /// `Some` when the check consumed and the store can take it back;
    /// `None` when nothing was consumed (a refusal, a cost of 0), or when
    /// the answer did not come from the store (a failure policy's, a
    /// cached rejection), or the store cannot give anything back.
    pub receipt: Option<Receipt>,
}

impl From<PlanDecision> for Returnable {
    /// A decision with nothing to give back.
    fn from(decision: PlanDecision) -> Self {
        Self {
            decision,
            receipt: None,
        }
    }
}

/// How a [`Store::give_back`](crate::Store::give_back) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GivenBack {
    /// Every limit's state is what it would be had the check been refused
    /// (or nothing of the check's use was left to take back).
    Restored,
    /// Some limit was used again since, and giving its units back could
    /// let in more than the policy allows (a token bucket that would have
    /// refilled to full meanwhile): that part of the consumption stays, an
    /// error towards admitting less. In memory that is final. A Redis store
    /// keeps such a give-back for 10 s and tries it again when a later one
    /// of the same client is restored (the newer use given back, the state
    /// may be as this check left it again), so there it may still be
    /// given back: towards the state had both checks been refused. Giving
    /// back newest first, as a request of several clients does, meets
    /// neither.
    Kept,
}
