//! `[store] clock`: whose clock times a shared store's decisions.

use tollgate_redis::TimeSource;

use super::{file, At};
use crate::Error;

/// The names `clock` takes, the default first.
const CLOCK_NAMES: [&str; 2] = ["caller", "redis"];

/// `clock`: `"caller"` (the default: the server's own clock, as the memory
/// store) or `"redis"` (Redis's `TIME`, read inside the script, so that
/// servers whose clocks disagree still share one limit exactly).
pub(super) fn build_clock(section: &file::StoreSection, at: &At<'_>) -> Result<TimeSource, Error> {
    let Some(name) = &section.clock else {
        return Ok(TimeSource::Caller);
    };
    match name.get_ref().as_str() {
        "caller" => Ok(TimeSource::Caller),
        "redis" => Ok(TimeSource::Redis),
        other => Err(at(
            name.span(),
            format!(
                "unknown clock {other:?}: known ones are {}",
                CLOCK_NAMES.join(", ")
            ),
        )),
    }
}
