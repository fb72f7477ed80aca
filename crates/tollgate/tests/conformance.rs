//! The conformance suite (`tollgate_testkit::conformance`) on the in-memory
//! store: every case, one test each, against the naive models and the
//! hand-written answers. The Redis legs run in `tollgate-redis`'s tests.

use std::sync::Arc;

use tollgate::{MemoryBackend, Store};

mod memory {
    use super::*;

    tollgate_testkit::conformance_tests!(Some(|| async {
        Arc::new(MemoryBackend::new()) as Arc<dyn Store>
    }));
}
