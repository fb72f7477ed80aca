//! A client's request body on its way to the upstream, which says when it
//! has been sent in full: the upstream's time to answer is counted from
//! then (`--upstream-timeout`), as Envoy counts a route's timeout from the
//! end of the downstream request, so that a slow but moving upload is not
//! cut off as a silent upstream. An upload that stops moving is closed by
//! the client connection's `idle_timeout`.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::oneshot;

/// The client's body as the upstream connection reads it.
pub(crate) struct UploadBody {
    body: Incoming,
    /// Told (or dropped) once the body has been read to its end; `None`
    /// for a body that was empty from the start, or once told.
    sent: Option<oneshot::Sender<()>>,
}

/// The end of a request's upload, awaited before its response is timed.
pub(crate) type UploadEnd = Option<oneshot::Receiver<()>>;

impl UploadBody {
    /// `body`, and what tells its end: `None` when there is nothing to send
    /// (a `GET`), so that such a request allocates nothing for it.
    pub(crate) fn new(body: Incoming) -> (Self, UploadEnd) {
        if body.is_end_stream() {
            return (Self { body, sent: None }, None);
        }
        let (sent, end) = oneshot::channel();
        let upload = Self {
            body,
            sent: Some(sent),
        };
        (upload, Some(end))
    }
}

impl Body for UploadBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        let ended = match &frame {
            None => true,
            Some(Ok(_)) => this.body.is_end_stream(),
            // A broken body ends the upload too: hyper then fails the
            // request, and no response is awaited.
            Some(Err(_)) => true,
        };
        if ended {
            if let Some(sent) = this.sent.take() {
                let _ = sent.send(());
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
