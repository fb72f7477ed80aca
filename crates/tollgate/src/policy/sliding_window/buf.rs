//! Where a sliding log keeps its entries: the first in place, more on the
//! heap.

use super::log::Entry;

/// A log's entries: one in place, or any number on the heap.
///
/// Most clients of a busy service send about one request per window, so
/// their log holds one entry at a time: in place, it is read with the rest
/// of the client's slot, where a `Vec` would cost a second cache miss per
/// decision (and an allocation per client). Both fit in a `Vec`'s 24 bytes.
#[derive(Debug, Clone)]
pub(super) enum Buf {
    One(Entry),
    Many(Vec<Entry>),
}

impl Default for Buf {
    fn default() -> Self {
        Buf::Many(Vec::new())
    }
}

impl Buf {
    pub(super) fn as_slice(&self) -> &[Entry] {
        match self {
            Buf::One(entry) => std::slice::from_ref(entry),
            Buf::Many(entries) => entries,
        }
    }

    pub(super) fn last_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Buf::One(entry) => Some(entry),
            Buf::Many(entries) => entries.last_mut(),
        }
    }

    /// Removes the first `n` entries.
    pub(super) fn drain_front(&mut self, n: usize) {
        match self {
            Buf::Many(entries) => drop(entries.drain(..n)),
            Buf::One(_) => *self = Buf::default(),
        }
    }

    pub(super) fn push(&mut self, entry: Entry) {
        match self {
            Buf::Many(entries) if entries.capacity() == 0 => *self = Buf::One(entry),
            Buf::Many(entries) => entries.push(entry),
            Buf::One(first) => {
                // Four, as a `Vec`'s first growth would reserve.
                let mut entries = Vec::with_capacity(4);
                entries.extend([*first, entry]);
                *self = Buf::Many(entries);
            }
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Buf::One(_) => 0,
            Buf::Many(entries) => entries.capacity() * std::mem::size_of::<Entry>(),
        }
    }
}
