//! Measuring the offset between the store's monotonic clock and Redis's
//! `TIME` (see [`crate::deadline`]): before a call when the store has no
//! estimate yet, and in the background, one measurement at a time, when
//! the estimate ages, so that the calls never wait on a node that stalls.

use std::sync::Arc;
use std::time::Duration;

use crate::call::Scripts;
use crate::deadline::RedisClock;
use crate::RedisStoreError;

/// Measures the offset with one `TIME` round trip (on a cluster, to every
/// master), and returns the offset now in force.
pub(crate) async fn measure_offset(scripts: &Scripts) -> Result<i64, RedisStoreError> {
    let clock = &scripts.clock;
    let sent_us = clock.now_us();
    let redis_us = scripts.connection.time_us().await?;
    let received_us = clock.now_us();
    Ok(clock.record(sent_us, received_us, redis_us))
}

/// [`measure_offset`] on the store's home runtime, for a caller that waits
/// for it (the first decision of a store made without connecting: its
/// connection is made by this first call, and so must be made at home,
/// `connection::home`).
pub(crate) async fn measure_offset_at_home(scripts: &Arc<Scripts>) -> Result<i64, RedisStoreError> {
    let measuring = scripts.clone();
    scripts
        .spawn(async move { measure_offset(&measuring).await })
        .await
        .unwrap_or(Err(RedisStoreError::BatchLost))
}

/// Measures the offset in a task of its own, unless one is running, giving
/// up after `timeout` (the next aging estimate asks again): the calls go on
/// meanwhile with the old estimate.
pub(crate) fn in_background(scripts: &Arc<Scripts>, timeout: Duration) {
    if !scripts.clock.start_measuring() {
        return;
    }
    let measuring = Measuring(scripts.clock.clone());
    let measured = scripts.clone();
    scripts.spawn(async move {
        let _measuring = measuring;
        // A failed or late measurement keeps the old estimate.
        let _ = tokio::time::timeout(timeout, measure_offset(&measured)).await;
    });
}

/// Gives the background measurement back when its task ends, however it
/// ends (made before the task is spawned, so that a task the runtime drops
/// before its first poll gives it back too).
struct Measuring(Arc<RedisClock>);

impl Drop for Measuring {
    fn drop(&mut self) {
        self.0.done_measuring();
    }
}
