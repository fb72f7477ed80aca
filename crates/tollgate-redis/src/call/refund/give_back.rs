//! Giving back at once what a call answered in time consumed
//! ([`tollgate::Store::give_back`]): the refund of the parent module, sent
//! by its caller rather than queued.

use std::sync::Arc;

use tollgate::GivenBack;

use super::queue::attempt;
use super::stale::retry_stale_of;
use super::Refund;
use crate::call::Scripts;
use crate::RedisStoreError;

/// Takes back now what a call answered in time consumed, for a caller
/// that refused its request because another client of it refused
/// ([`tollgate::Store::give_back`]). Sent at once rather than queued: the
/// caller holds the client's lock until this returns, so no later call of
/// its own comes first. Counted with the refunds; one that finds the
/// state changed is kept to be tried again, as theirs are.
///
/// # Errors
/// The refund's error, or [`RedisStoreError::Timeout`] past
/// [`REFUND_TIMEOUT`](super::REFUND_TIMEOUT). When trying again may fix it
/// (Redis could not be reached), the refund is sent again in the
/// background, as a queued one is; otherwise the consumption stays.
///
/// It runs in a task of its own, which finishes (and keeps a refund that
/// found the state changed) even when the caller stops waiting.
pub(crate) async fn give_back(
    scripts: &Arc<Scripts>,
    refund: Refund,
) -> Result<GivenBack, RedisStoreError> {
    let giving = scripts.clone();
    let outstanding = scripts.outstanding.mark();
    scripts
        .spawn(async move {
            let given_back = give_back_now(&giving, refund).await;
            drop(outstanding);
            given_back
        })
        .await
        .unwrap_or(Err(RedisStoreError::BatchLost))
}

async fn give_back_now(
    scripts: &Arc<Scripts>,
    refund: Refund,
) -> Result<GivenBack, RedisStoreError> {
    let client = refund.client.clone();
    let queued = scripts.refunds.number(scripts, refund);
    let given_back = attempt(scripts, queued).await?;
    if given_back == GivenBack::Restored {
        // In the background: the caller holds the client's lock until this
        // returns, and the client's kept refunds may be many.
        let retrying = scripts.clone();
        scripts.spawn(async move {
            retry_stale_of(&retrying, &client).await;
        });
    }
    Ok(given_back)
}
