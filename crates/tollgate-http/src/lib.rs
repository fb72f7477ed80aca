//! # tollgate-http
//!
//! What every HTTP front end of tollgate (the `serve` API, the tower layer,
//! the reverse proxy) does the same way, defined once here so that none of
//! them re-decides it:
//!
//! - [`insert_headers`]: the IETF `RateLimit-Policy`, `RateLimit` and
//!   `Retry-After` fields of a decision, as the core's
//!   [`tollgate::RateLimitHeaders`] formats them, into an [`http::HeaderMap`];
//! - [`header_key`] and [`api_key`]: who is calling, read from a named header
//!   or from `Authorization: Bearer KEY` / `X-Api-Key: KEY`, with a
//!   [`KeyError`] saying what is wrong when there is no usable key;
//! - [`unsupported_transfer_coding`]: a body no front end reads (any
//!   transfer coding but one `chunked`).
//!
//! A front end translates: the server turns a [`KeyError`] into a 400 with
//! its message, the tower layer into its missing-key policy.
//!
//! ```
//! use http::HeaderMap;
//!
//! let mut request = HeaderMap::new();
//! request.insert("authorization", "Bearer acme".parse().unwrap());
//! assert_eq!(tollgate_http::api_key(&request).unwrap(), "acme");
//! ```

#![forbid(unsafe_code)]

mod error;
mod headers;
mod key;
mod transfer_coding;

pub use error::KeyError;
pub use headers::{insert_headers, RATELIMIT, RATELIMIT_POLICY};
pub use key::{api_key, header_key, X_API_KEY};
pub use transfer_coding::unsupported_transfer_coding;
