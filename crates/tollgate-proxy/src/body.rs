//! The body of the proxy's answers: the upstream's, or the proxy's own.

use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::{Body, Frame, SizeHint};

use crate::pool::ReturningBody;

/// Why a body could not be read.
type BodyError = Box<dyn StdError + Send + Sync>;

/// The body of a forwarded answer: the upstream's, streaming (its
/// connection goes back to the pool once it is read to the end), or the
/// proxy's own (`502`, `504`).
pub struct ForwardBody(Either<ReturningBody, Full<Bytes>>);

impl std::fmt::Debug for ForwardBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match self.0 {
            Either::Left(_) => "upstream",
            Either::Right(_) => "proxy",
        };
        f.debug_tuple("ForwardBody").field(&from).finish()
    }
}

impl Body for ForwardBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.get_mut().0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

impl ForwardBody {
    /// The upstream's body, streaming.
    pub(crate) fn upstream(body: ReturningBody) -> Self {
        Self(Either::Left(body))
    }

    /// The proxy's own answer.
    pub(crate) fn proxy(text: Bytes) -> Self {
        Self(Either::Right(Full::new(text)))
    }
}
