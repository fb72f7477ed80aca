//! `[store] clock`: whose clock times a shared store's decisions.

use tollgate_redis::TimeSource;

use super::{file, At};
use crate::Error;

/// The names `clock` takes and what each means, the default first.
const CLOCKS: [(&str, TimeSource); 2] =
    [("caller", TimeSource::Caller), ("redis", TimeSource::Redis)];

/// `clock`: `"caller"` (the default: the server's own clock, as the memory
/// store) or `"redis"` (Redis's `TIME`, read inside the script, so that
/// servers whose clocks disagree still share one limit exactly).
pub(super) fn build_clock(section: &file::StoreSection, at: &At<'_>) -> Result<TimeSource, Error> {
    let Some(name) = &section.clock else {
        return Ok(CLOCKS[0].1);
    };
    let known = CLOCKS.iter().find(|(known, _)| known == name.get_ref());
    known.map(|(_, clock)| *clock).ok_or_else(|| {
        let names: Vec<&str> = CLOCKS.iter().map(|(name, _)| *name).collect();
        at(
            name.span(),
            format!(
                "unknown clock {:?}: known ones are {}",
                name.get_ref(),
                names.join(", ")
            ),
        )
    })
}

/// The name `clock` gives `source` in a config file: `"caller"` or
/// `"redis"` (what `/v1/config` shows).
pub fn clock_name(source: TimeSource) -> &'static str {
    let named = CLOCKS.iter().find(|(_, known)| *known == source);
    named.map_or(CLOCKS[0].0, |(name, _)| *name)
}
