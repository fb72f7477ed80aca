//! `[auth]`: where `GET /v1/auth` finds the client id.

use http::HeaderName;

use super::{file, At, DEFAULT_CLIENT_HEADER};
use crate::Error;

/// How `/v1/auth` finds the client id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientIdSource {
    /// From this header (`X-Client-Id` by default).
    Header(HeaderName),
    /// The API key is the client id: `Authorization: Bearer KEY`, or `X-Api-Key: KEY`.
    ApiKey,
}

pub(super) fn build_auth(
    section: &file::AuthSection,
    at: &At<'_>,
) -> Result<ClientIdSource, Error> {
    if let (Some(_), Some(api_key)) = (&section.header, &section.api_key) {
        if *api_key.get_ref() {
            return Err(at(
                api_key.span(),
                "auth: set either header or api_key = true, not both".to_owned(),
            ));
        }
    }
    if section.api_key.as_ref().is_some_and(|k| *k.get_ref()) {
        return Ok(ClientIdSource::ApiKey);
    }
    match &section.header {
        None => Ok(ClientIdSource::Header(HeaderName::from_static(
            DEFAULT_CLIENT_HEADER,
        ))),
        Some(name) => HeaderName::from_bytes(name.get_ref().as_bytes())
            .map(ClientIdSource::Header)
            .map_err(|_| {
                at(
                    name.span(),
                    format!(
                        "auth.header {:?} is not a valid HTTP header name",
                        name.get_ref()
                    ),
                )
            }),
    }
}
