//! `[connections]`: the limits on every HTTP connection of `tollgate serve`
//! and `tollgate proxy --config` (the header-read timeout, the idle
//! timeout, the cap on open connections per listen address). Their
//! defaults and bounds are `tollgate_connections`'s; a change needs a
//! restart.

use std::time::Duration;

use tollgate_connections::Limits;

use super::{file, At};
use crate::Error;

pub(super) fn build_connections(
    section: &file::ConnectionsSection,
    at: &At<'_>,
) -> Result<Limits, Error> {
    let defaults = Limits::default();
    let ms = |value: &Option<toml::Spanned<super::window::Millis>>, default: Duration| {
        value
            .as_ref()
            .map_or(default, |v| Duration::from_millis(v.get_ref().0))
    };
    let header_read_timeout = ms(&section.header_read_timeout, defaults.header_read_timeout);
    let idle_timeout = ms(&section.idle_timeout, defaults.idle_timeout);
    let max_connections = match &section.max_connections {
        None => defaults.max_connections,
        Some(v) => usize::try_from(*v.get_ref()).unwrap_or(usize::MAX),
    };
    Limits::new(header_read_timeout, idle_timeout, max_connections).map_err(|error| {
        let tollgate_connections::Error::OutOfBounds { name, .. } = &error else {
            return at(0..0, error.to_string());
        };
        let span = match *name {
            "header_read_timeout" => section.header_read_timeout.as_ref().map(|v| v.span()),
            "idle_timeout" => section.idle_timeout.as_ref().map(|v| v.span()),
            _ => section.max_connections.as_ref().map(|v| v.span()),
        };
        at(span.unwrap_or(0..0), format!("[connections] {error}"))
    })
}
