//! Why a request names no client.

use http::HeaderName;

/// Why no client key could be read from a request. The messages are meant
/// for the caller: the server answers them in a 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The header that carries the client id is not there.
    #[error("missing {0} header: it carries the client id")]
    MissingHeader(HeaderName),
    /// The header is there but holds only white space.
    #[error("the {0} header is empty: it carries the client id")]
    EmptyHeader(HeaderName),
    /// The header is given more than once: which of its values names the
    /// client is anyone's guess (a proxy that appends, a caller that adds
    /// one), so none is taken rather than charging the first.
    #[error("the {0} header is given more than once: it must name one client")]
    Repeated(HeaderName),
    /// The client id the header carries (its value, or a bearer token) is
    /// longer than a client id may be ([`tollgate::MAX_CLIENT_BYTES`]).
    #[error(
        "the client id in the {name} header is {bytes} bytes long, over the limit of {}",
        tollgate::MAX_CLIENT_BYTES
    )]
    TooLong {
        /// The header.
        name: HeaderName,
        /// Its value's length, trimmed.
        bytes: usize,
    },
    /// The header's bytes are not UTF-8 text.
    #[error("the {0} header is not valid UTF-8")]
    NotUtf8(HeaderName),
    /// `Authorization` is there but is not `Bearer KEY`, and there is no
    /// `X-Api-Key` header to fall back on.
    #[error(
        "the authorization header must be \"Bearer API_KEY\" (or send \"X-Api-Key: API_KEY\")"
    )]
    NotBearer,
    /// `Authorization: Bearer` and `X-Api-Key` name different keys. Which
    /// one the API behind checks is not known here, and taking either would
    /// let a client pick its own limit with the other, so none is taken.
    #[error("two API keys: \"Authorization: Bearer\" and \"X-Api-Key\" differ; send one")]
    TwoApiKeys,
    /// Neither `Authorization` nor `X-Api-Key` is there.
    #[error("missing API key: send \"Authorization: Bearer API_KEY\" or \"X-Api-Key: API_KEY\"")]
    MissingApiKey,
}

impl KeyError {
    /// Whether the request carries no key at all (no header, only white
    /// space, or an `Authorization` of another scheme with no `X-Api-Key`),
    /// rather than one that cannot be used (given twice, too long, not
    /// UTF-8). A layer that lets keyless requests through must still refuse
    /// the latter: a client would otherwise skip its limit by sending its key
    /// twice.
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            KeyError::MissingHeader(_)
                | KeyError::EmptyHeader(_)
                | KeyError::NotBearer
                | KeyError::MissingApiKey
        )
    }
}
