//! [`RedisTarget`]: every way to reach Redis, checked before connecting.
//!
//! - one node: `redis://host:port/db` or, over TLS, `rediss://host:port/db`;
//! - an ACL user: `redis://user:password@host:port` (a password alone:
//!   `redis://:password@host:port`);
//! - a Redis Cluster, from one or more seed nodes (every seed with the same
//!   scheme, database 0: a cluster has no other);
//! - a private certificate authority for `rediss://` ([`RedisTarget::with_ca_pem`],
//!   [`RedisTarget::with_ca_file`]); without one, the system's trusted roots.
//!
//! TLS runs on rustls (with the `ring` provider), not OpenSSL. Where a
//! target is shown (logs, errors), [`RedisTarget::redacted`] prints it
//! without its password ([`crate::redact_url`]).

use std::path::Path;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::{redact_url, RedisStoreError};

/// Where a Redis store connects: one node or a cluster, with an optional
/// private certificate authority.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    nodes: Vec<String>,
    cluster: bool,
    ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl RedisTarget {
    /// One Redis node.
    pub fn single(url: impl Into<String>) -> Self {
        Self {
            nodes: vec![url.into()],
            cluster: false,
            ca_pem: None,
        }
    }

    /// A Redis Cluster, reached through `seeds` (some of its nodes: the
    /// client learns the rest).
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        Self {
            nodes: seeds.into_iter().map(Into::into).collect(),
            cluster: true,
            ca_pem: None,
        }
    }

    /// Trusts the certificate authorities in `pem` (PEM text) for
    /// `rediss://` instead of the system's roots.
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// As [`RedisTarget::with_ca_pem`], reading the PEM file at `path`.
    ///
    /// # Errors
    /// [`RedisStoreError::Ca`] when the file cannot be read.
    pub fn with_ca_file(self, path: &Path) -> Result<Self, RedisStoreError> {
        let pem = std::fs::read(path).map_err(|e| {
            RedisStoreError::Ca(format!(
                "cannot read the Redis CA file {}: {e}",
                path.display()
            ))
        })?;
        Ok(self.with_ca_pem(pem))
    }

    /// Whether this is a cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The node URLs, as given (with their passwords: do not log them; see
    /// [`RedisTarget::redacted`]).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The target for logs and errors, without passwords: each URL as
    /// given, masked by [`crate::redact_url`], e.g.
    /// `rediss://alice:***@10.0.0.5:6380/2`, or `cluster [redis://h1:7000,
    /// redis://h2:7000]`, with `(private CA)` when one is given.
    pub fn redacted(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|url| redact_url(url)).collect();
        let ca = if self.ca_pem.is_some() {
            " (private CA)"
        } else {
            ""
        };
        if self.cluster {
            format!("cluster [{}]{ca}", nodes.join(", "))
        } else {
            format!("{}{ca}", nodes.join(", "))
        }
    }

    /// Checks everything that can be checked without connecting: every URL
    /// parses, one node unless a cluster, at least one seed, seeds all
    /// `redis://` or all `rediss://` on database 0, a CA only with
    /// `rediss://`, and a CA that holds a certificate.
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] saying what is wrong (never showing a
    /// password), or [`RedisStoreError::Ca`] for the CA.
    pub fn validate(&self) -> Result<(), RedisStoreError> {
        self.infos().map(|_| ())
    }

    fn infos(&self) -> Result<Vec<ConnectionInfo>, RedisStoreError> {
        let bad = |message: String| Err(RedisStoreError::Config(message));
        if self.nodes.is_empty() {
            return bad("no Redis node given".to_owned());
        }
        if !self.cluster && self.nodes.len() > 1 {
            return bad("one Redis URL expected; give several as a cluster".to_owned());
        }
        let mut infos = Vec::with_capacity(self.nodes.len());
        for (i, url) in self.nodes.iter().enumerate() {
            let info = url.as_str().into_connection_info().map_err(|e| {
                let unix = url.starts_with("unix:") || url.starts_with("redis+unix:");
                let what = match (unix, e.to_string().contains("database")) {
                    (false, true) => {
                        "has no valid database number (the path after host:port, e.g. /0)"
                    }
                    (true, true) => {
                        "has no valid database number (?db= after the socket's path, \
                         e.g. unix:///run/redis.sock?db=0)"
                    }
                    (false, false) => "is not a redis://, rediss:// or unix:// URL",
                    (true, false) => {
                        "is not a unix socket's URL (unix:// then the socket's absolute \
                         path, e.g. unix:///run/redis.sock)"
                    }
                };
                RedisStoreError::Config(format!("Redis URL number {} {what}: {e}", i + 1))
            })?;
            if info.redis_settings().db() < 0 {
                return bad(format!(
                    "{}: database {} does not exist: Redis numbers its databases from 0",
                    redact_url(url),
                    info.redis_settings().db()
                ));
            }
            if self.cluster && matches!(info.addr(), ConnectionAddr::Unix(_)) {
                return bad(format!(
                    "{}: a Redis Cluster cannot be reached through a unix socket (its nodes \
                     name each other by IP and port): give its seeds as redis://host:port",
                    redact_url(url)
                ));
            }
            if self.cluster && info.redis_settings().db() != 0 {
                return bad(format!(
                    "{}: a Redis Cluster has only database 0",
                    redact_url(url)
                ));
            }
            infos.push(info);
        }
        let tls = infos.iter().filter(|i| is_tls(i)).count();
        if tls != 0 && tls != infos.len() {
            return bad("the cluster's seeds mix redis:// and rediss://".to_owned());
        }
        if let Some(pem) = &self.ca_pem {
            let bad_ca = |message: &str| Err(RedisStoreError::Ca(message.to_owned()));
            if tls == 0 {
                return bad_ca("a Redis CA is given but the URL is not rediss://");
            }
            if let Err(why) = check_ca_pem(pem) {
                return bad_ca(&why);
            }
        }
        Ok(infos)
    }

    fn certificates(&self) -> Option<TlsCertificates> {
        self.ca_pem.as_ref().map(|pem| TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        })
    }

    /// The client for one node.
    pub(crate) fn client(&self) -> Result<Client, RedisStoreError> {
        install_crypto_provider();
        let info = self.infos()?.remove(0);
        Ok(match self.certificates() {
            Some(certificates) => Client::build_with_tls(info, certificates)?,
            None => Client::open(info)?,
        })
    }

    /// The client for a cluster, which sends a command again up to
    /// [`CLUSTER_RETRIES`] times (after its connection dropped, to follow a
    /// slot that moved, or after a wait: every script acts once all the
    /// same, see `connection.rs`), its waits within `timeout` (see
    /// [`retry_wait_unit_ms`]). Its calls wait for their replies up to
    /// [`crate::RESPONSE_TIMEOUT`] in all, retries included, as on one node:
    /// without it a call whose reply never comes would hold its master's
    /// batch in flight for good, and never be claimed ([`crate::call::lost`]).
    pub(crate) fn cluster_client(
        &self,
        timeout: Duration,
    ) -> Result<ClusterClient, RedisStoreError> {
        install_crypto_provider();
        let infos = self.infos()?;
        let unit = retry_wait_unit_ms(timeout);
        let mut builder = ClusterClient::builder(infos)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(crate::RESPONSE_TIMEOUT)
            .retries(CLUSTER_RETRIES)
            .retry_wait_formula(unit, 2)
            .min_retry_wait(unit)
            .max_retry_wait(unit << CLUSTER_RETRIES);
        if let Some(certificates) = self.certificates() {
            builder = builder.certs(certificates);
        }
        Ok(builder.build()?)
    }
}

/// How many times a cluster's command is sent again.
const CLUSTER_RETRIES: u32 = 3;

/// The unit `u` (ms) of a cluster's waits before it sends a command again
/// after an answer that asks it to wait: `TRYAGAIN` (some of a call's keys
/// moved to another master, the others not yet: a resharding), `LOADING`,
/// `CLUSTERDOWN`, `MASTERDOWN`, each refused before the script ran. Wait
/// `k` lasts from `u` to `2^k u` ms (redis-rs's formula), so the three
/// take at most `14 u`: `u` is a twenty-eighth of the caller's `timeout`,
/// so that they end within half of it. A call waiting them out holds its
/// master's place in flight (`batch.rs`: with one batch in flight, that
/// master's other clients wait behind it), and its resends take round
/// trips too: waits up to the whole timeout timed out the calls queued
/// behind a client whose slot moved, under load (an audit), where half
/// leaves them time. redis-rs's own waits (at least 1.28 s each) came
/// after every caller had given up.
fn retry_wait_unit_ms(timeout: Duration) -> u64 {
    let waits = 2 * ((2u64 << CLUSTER_RETRIES) - 2);
    u64::try_from(timeout.as_millis() / u128::from(waits))
        .unwrap_or(u64::MAX >> CLUSTER_RETRIES)
        .clamp(1, u64::MAX >> CLUSTER_RETRIES)
}

/// Checks that `pem` holds certificates that can serve as trust anchors,
/// as redis-rs will read them when it connects (rustls's root store): a
/// file that only looks like one (PEM armour around anything) was refused
/// only then, with "Unable to parse TLS trust anchors", after `tollgate
/// check` had passed it.
fn check_ca_pem(pem: &[u8]) -> Result<(), String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the Redis CA file is not valid PEM: {e}"))?;
    if certificates.is_empty() {
        return Err("the Redis CA file holds no PEM certificate".to_owned());
    }
    let (_, unreadable) = RootCertStore::empty().add_parsable_certificates(certificates);
    if unreadable > 0 {
        return Err(format!(
            "{unreadable} certificate(s) in the Redis CA file cannot be read as a CA (not X.509 DER inside the PEM armour)"
        ));
    }
    Ok(())
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// rustls needs one process-wide crypto provider; installing it twice (or
/// after another library did) is harmless, so the result is ignored.
///
/// rustls 0.23.48 deprecates the *ring* provider (no post-quantum key
/// exchange); its successor, aws-lc-rs, brings a C and CMake build. The
/// lock file keeps 0.23.46, and the `allow` keeps a `cargo update` from
/// failing the build (warnings are errors in CI) until that move is made.
#[allow(deprecated)]
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clusters_waits_before_sending_again_end_within_half_the_callers_timeout() {
        assert_eq!(retry_wait_unit_ms(Duration::from_millis(100)), 3);
        assert_eq!(retry_wait_unit_ms(Duration::from_secs(1)), 35);
        assert_eq!(
            retry_wait_unit_ms(Duration::ZERO),
            1,
            "never no wait at all"
        );
        let longest = retry_wait_unit_ms(Duration::MAX);
        assert!(longest
            .checked_shl(CLUSTER_RETRIES)
            .is_some_and(|max| max >= longest));
    }
}
