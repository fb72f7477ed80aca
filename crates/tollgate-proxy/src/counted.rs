//! An upstream connection's socket, counting the bytes read from it: a
//! request lost with its connection goes once more on another only when
//! not one byte of an answer came (`forward.rs`), as Go's HTTP client
//! decides; an upstream that began answering, however badly, acted on it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// `stream`, its reads counted in a counter the connection's owner keeps.
pub(crate) struct Counted {
    stream: TcpStream,
    read: Arc<AtomicU64>,
}

impl Counted {
    /// `stream`, and the counter of the bytes read from it.
    pub(crate) fn new(stream: TcpStream) -> (Self, Arc<AtomicU64>) {
        let read = Arc::new(AtomicU64::new(0));
        let counted = Self {
            stream,
            read: read.clone(),
        };
        (counted, read)
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            // One thread reads and writes it at a time (the connection's
            // task, then the request that took the connection).
            this.read.fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
