//! Handing a call's reply to its caller across tasks, so that a reply whose
//! caller is gone is refunded ([`crate::call::refund`]) rather than dropped.
//!
//! A call is sent by a task that outlives its caller (a batch's, or one of
//! its own). The caller can be gone at two moments, and both are caught:
//! before the reply is handed over (the hand-over fails: [`Answer::send`]),
//! or after it was handed over but before the caller read it (its future
//! dropped in between, or its timeout polled first: [`Answered`]'s drop
//! finds the reply unread). The caller's read is not subject to Tokio's
//! cooperative budget, so a reply already there is read even by a task
//! whose budget ran out in the same poll as its timeout.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::call::refund::Refund;
use crate::call::{Call, CallReply, Scripts};
use crate::settle::Mark;
use crate::RedisStoreError;

/// What goes to the caller: the call back, for a refund should no one read
/// the reply, and the reply. The call holds its receipt open
/// ([`Call::open`]) until the caller reads the reply, or, when it is lost,
/// until its claim ends, or, when it is refunded, until its refund ends.
type Delivery = (Call, CallReply);

/// A channel from the task that sends a call to the call's caller.
pub(crate) fn channel(scripts: &Arc<Scripts>) -> (Answer, Answered) {
    let (sender, receiver) = oneshot::channel();
    let answered = Answered {
        receiver,
        scripts: scripts.clone(),
    };
    let answer = Answer {
        sender,
        _outstanding: scripts.outstanding.mark(),
    };
    (answer, answered)
}

/// An [`Answer`] whose caller's side is a bare receiver, which reads
/// nothing and refunds nothing: for tests of the queue.
#[cfg(test)]
pub(crate) fn unread() -> (Answer, oneshot::Receiver<Delivery>) {
    let (sender, receiver) = oneshot::channel();
    let outstanding = Arc::new(crate::settle::Outstanding::default());
    let answer = Answer {
        sender,
        _outstanding: outstanding.mark(),
    };
    (answer, receiver)
}

/// The sending task's side.
#[derive(Debug)]
pub(crate) struct Answer {
    sender: oneshot::Sender<Delivery>,
    /// Counted until the reply is handed over (and its refund queued, if
    /// the caller is gone): what [`crate::RedisStore::settle`] waits for.
    _outstanding: Mark,
}

impl Answer {
    /// Whether the caller is gone (no need to send its call).
    pub(crate) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Hands `reply` to the caller of `call`; when the caller is gone and
    /// the call consumed, takes the consumption back; when no reply came
    /// although the call may have run (or, on a connection that sends a
    /// command again, the last attempt came too late to run), looks the
    /// call up by its receipt ([`crate::call::lost`]). Must be called inside a
    /// Tokio runtime.
    pub(crate) fn send(self, scripts: &Arc<Scripts>, call: Call, reply: CallReply) {
        let Answer {
            sender,
            _outstanding,
        } = self;
        let resent = scripts.connection.resends();
        let unknown = match &reply {
            Err(e) => e.outcome_unknown(resent),
            // Started past its deadline, so this attempt wrote nothing; an
            // earlier attempt of a command sent again may have.
            Ok(reply) => resent && reply.get(1) == Some(&-1),
        };
        if unknown {
            scripts.lost.push(scripts, &call);
        }
        if let Err((call, Ok(reply))) = sender.send((call, reply)) {
            refund_abandoned(scripts, &call, &reply);
        }
    }
}

/// The caller's side: read with [`Answered::reply`].
pub(crate) struct Answered {
    receiver: oneshot::Receiver<Delivery>,
    scripts: Arc<Scripts>,
}

impl Answered {
    /// The reply, once the task hands it over;
    /// [`RedisStoreError::BatchLost`] if the task ended without one.
    pub(crate) async fn reply(mut self) -> CallReply {
        match tokio::task::unconstrained(&mut self.receiver).await {
            Ok((_, reply)) => reply,
            Err(_) => Err(RedisStoreError::BatchLost),
        }
    }
}

impl Drop for Answered {
    fn drop(&mut self) {
        // Handed over, never read: the caller went away in between.
        if let Ok((call, Ok(reply))) = self.receiver.try_recv() {
            refund_abandoned(&self.scripts, &call, &reply);
        }
    }
}

/// Queues the refund of `call`, whose caller never read `reply`, if it
/// consumed. Outside a Tokio runtime (a caller dropped after its runtime
/// ended) no refund can be sent: counted failed.
fn refund_abandoned(scripts: &Arc<Scripts>, call: &Call, reply: &[i64]) {
    let Some(refund) = Refund::of(call, reply) else {
        return;
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        scripts.refunds.push(scripts, refund);
    } else {
        scripts.refunds.count_failed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Arg;
    use crate::connection::Connection;
    use crate::deadline::RedisClock;
    use crate::RedisTarget;

    /// Scripts on a Redis that is not there (a refund sent is refused, and
    /// waits to be sent again).
    fn scripts() -> Arc<Scripts> {
        let target = RedisTarget::single("redis://127.0.0.1:1");
        let home = tokio::runtime::Handle::current();
        let connection =
            Connection::lazy(&target, std::time::Duration::from_millis(100), home.clone())
                .expect("a lazy connection");
        Arc::new(Scripts::new(connection, Arc::new(RedisClock::new()), home))
    }

    /// A call of one sliding-window limit at cost 2 (its receipt id and
    /// watermark last), and its reply: allowed, consumed, with its undo
    /// numbers.
    fn consumed() -> (Call, CallReply) {
        let call = Call {
            keys: vec!["p:{c:a}:seen".into(), "p:{c:a}:1".into()],
            args: vec![
                Arg::Number(1_000),
                Arg::Number(2),
                Arg::Number(60_000),
                Arg::Number(9_999),
                Arg::Text("s"),
                Arg::Number(10),
                Arg::Number(1_000),
                Arg::Text("0"),
                Arg::Receipt { tag: 0xab, seq: 7 },
                Arg::Number(7),
            ],
            wait: None,
            open: None,
        };
        (call, Ok(vec![7, 1_000, 1, 1, 8, 0, 1_000, 2, 2]))
    }

    /// Whether a refund was queued: the store is not idle, as it is not
    /// until the refund is answered (here, never).
    fn refund_queued(scripts: &Scripts) -> bool {
        !scripts.refunds.is_idle()
    }

    #[tokio::test]
    async fn a_reply_handed_over_but_never_read_is_refunded() {
        let scripts = scripts();
        let (answer, answered) = channel(&scripts);
        let (call, reply) = consumed();
        answer.send(&scripts, call, reply);
        assert!(!refund_queued(&scripts), "not yet: the reply may be read");
        drop(answered);
        assert!(refund_queued(&scripts));
    }

    #[tokio::test]
    async fn a_reply_whose_caller_is_gone_is_refunded_and_a_read_one_is_not() {
        let scripts = scripts();
        let (answer, answered) = channel(&scripts);
        drop(answered);
        let (call, reply) = consumed();
        answer.send(&scripts, call, reply);
        assert!(refund_queued(&scripts));

        let scripts = self::scripts();
        let (answer, answered) = channel(&scripts);
        let (call, reply) = consumed();
        answer.send(&scripts, call, reply.clone());
        assert_eq!(
            answered.reply().await.expect("the reply"),
            reply.expect("ok")
        );
        assert!(!refund_queued(&scripts), "read: no refund");
    }
}
