//! A draining task's place: the one task that sends a queue (a batch in
//! flight, the refunds, the claims of lost calls) marks its place taken
//! while it runs, and must give it back when it ends, so that the next item
//! queued starts a task. It gives it back under the queue's lock when it
//! finds the queue empty; [`TaskPlace`] gives it back if the task ends any
//! other way (a panic, or its runtime shutting down mid-call).

/// Runs its `give_back` when dropped, unless told the place was given back.
pub(crate) struct TaskPlace<F: FnOnce()> {
    give_back: Option<F>,
}

impl<F: FnOnce()> TaskPlace<F> {
    /// A place that `give_back` gives back.
    pub(crate) fn new(give_back: F) -> Self {
        Self {
            give_back: Some(give_back),
        }
    }

    /// The task gave its place back itself: nothing to do when dropped.
    pub(crate) fn given_back(&mut self) {
        self.give_back = None;
    }
}

impl<F: FnOnce()> Drop for TaskPlace<F> {
    fn drop(&mut self) {
        if let Some(give_back) = self.give_back.take() {
            give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_place_not_given_back_is_given_back_when_dropped_and_only_then() {
        let taken = Cell::new(true);
        drop(TaskPlace::new(|| taken.set(false)));
        assert!(!taken.get(), "dropped early: given back");

        taken.set(true);
        let mut place = TaskPlace::new(|| taken.set(false));
        place.given_back();
        drop(place);
        assert!(taken.get(), "given back by the task: not again");
    }
}
