//! Whether the Redis user may do what every decision needs, checked once
//! the store has connected ([`RedisStore::connect_to`]): an ACL user that
//! logs in but lacks `EVALSHA`, `SCRIPT LOAD` or access to the keys under
//! the prefix would otherwise pass start-up and then have every decision
//! refused with `NOPERM`, answered by the failure policy (under fail-open,
//! nothing limited, and no warning).
//!
//! Checked by doing it, harmlessly, rather than by `ACL DRYRUN`, which
//! needs the user's own name and a permission (`+acl|dryrun`) that an
//! application's user rarely has, and which managed services often
//! rename: the read-only inspection script is run by `EVALSHA` on a
//! client's keys under the prefix, as any call runs a script (loading it
//! with `SCRIPT LOAD` after `NOSCRIPT`, so a user who may not load scripts
//! is refused there on a Redis that does not hold it yet). Redis checks a
//! script's declared keys for read and write access before it runs it, so
//! a user limited to other keys, or to reading them, is refused there;
//! nothing is written.
//!
//! The scripts are not all loaded on every primary beforehand: a cluster
//! connection that had loaded them then failed to get the claim of a lost
//! reply through in time after a cut connection (`cluster_replies.rs`).

use tollgate::{AnyPolicy, Clock, Limit, Plan, SystemClock};

use crate::error::loggable;
use crate::{RedisStore, RedisStoreError};

/// The client id of the check's inspection: its keys are read, never
/// written.
const PROBE_CLIENT: &str = "tollgate-start-up-check";

impl RedisStore {
    /// Runs the inspection script (loading it if Redis lacks it) on a
    /// client's keys under the prefix.
    ///
    /// # Errors
    /// [`RedisStoreError::NotPermitted`] naming what the user lacks, or
    /// [`RedisStoreError::MissingCommand`] naming a command the server has
    /// not (renamed or disabled). Any other error is not this check's to
    /// report (a node that serves no slot yet, a busy script, a replica):
    /// the store's calls meet it, and the failure policy answers them, as
    /// without the check.
    pub(crate) async fn check_permissions(&self) -> Result<(), RedisStoreError> {
        match self.check_what_decisions_need().await {
            Err(
                e @ (RedisStoreError::NotPermitted { .. } | RedisStoreError::MissingCommand { .. }),
            ) => Err(e),
            _ => Ok(()),
        }
    }

    /// Does, harmlessly, what every decision needs (see the module doc):
    /// what the start-up check of [`RedisStore::connect_to`] runs, for a
    /// service that started while Redis was down to run once it is up.
    ///
    /// # Errors
    /// Every error as met: [`RedisStoreError::NotPermitted`] and
    /// [`RedisStoreError::MissingCommand`] for what no wait fixes, a
    /// transient one while Redis is not up, or any other.
    pub async fn check_what_decisions_need(&self) -> Result<(), RedisStoreError> {
        let policy = AnyPolicy::from_name("sliding-window", 1, 1_000)
            .map_err(|e| RedisStoreError::Config(e.to_string()))?;
        let plan = Plan::new("start-up-check", vec![Limit::new("check", policy, false)])
            .map_err(|e| RedisStoreError::Config(e.to_string()))?;
        self.inspect(&plan, PROBE_CLIENT, SystemClock.now_ms())
            .await
            .map(drop)
            .map_err(|e| self.refusal(e))
    }

    /// `error` as [`RedisStoreError::NotPermitted`] when it is an ACL
    /// refusal, naming what the user lacks; else as it is. Every refusal
    /// counts, whatever its words (they changed in Redis 7.2: "No
    /// permissions to access a key", "ACL failure in script"); the words
    /// only pick the hint.
    pub(crate) fn refusal(&self, error: RedisStoreError) -> RedisStoreError {
        as_refusal(self.keys.prefix(), error)
    }
}

/// [`RedisStore::refusal`] for the keys under `prefix`.
fn as_refusal(prefix: &str, error: RedisStoreError) -> RedisStoreError {
    let RedisStoreError::Redis(e) = &error else {
        return error;
    };
    let detail = e.detail().unwrap_or_default();
    if e.code() == Some("ERR") && detail.starts_with("unknown command") {
        let command = detail
            // Quoted 'so' by Redis 7, `so` by Redis 6.
            .split(['\'', '`'])
            .nth(1)
            .unwrap_or("?")
            .to_ascii_uppercase();
        return RedisStoreError::MissingCommand {
            command,
            said: loggable(e),
        };
    }
    let refused = e.code() == Some("NOPERM")
        || detail.contains("can't run this command")
        || detail.contains("ACL failure");
    if !refused {
        return error;
    }
    let (what, grant) = what_to_grant(prefix, detail);
    RedisStoreError::NotPermitted {
        what,
        grant,
        said: loggable(e),
    }
}

/// What an ACL refusal saying `detail` lacks, and what to grant.
fn what_to_grant(prefix: &str, detail: &str) -> (String, String) {
    let detail = detail.to_ascii_lowercase();
    let (what, grant) = match detail.as_str() {
        d if d.contains("'evalsha'") => ("cannot run EVALSHA", "+evalsha".to_owned()),
        d if d.contains("'script") => (
            "cannot load tollgate's scripts (SCRIPT LOAD)",
            "+script|load".to_owned(),
        ),
        d if d.contains("'time'") => ("cannot run TIME", "+time".to_owned()),
        d if d.contains("script") || d.contains("can't run this command") => (
            "cannot run a command tollgate's scripts run",
            "the commands of +@read +@write +@scripting +time +ping (and +select for a database other than 0)".to_owned(),
        ),
        d if d.contains("key") => {
            return (
                format!("cannot read and write the keys under the prefix {prefix:?}"),
                format!("~{prefix}:* (read and write)"),
            );
        }
        _ => (
            "was refused a command tollgate needs",
            format!("+@read +@write +@scripting +time +ping and ~{prefix}:*"),
        ),
    };
    (what.to_owned(), grant)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Redis error reply, as the server sends it.
    fn reply(text: &str) -> RedisStoreError {
        let value = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        let redis::Value::ServerError(error) = value else {
            panic!("not an error reply: {value:?}");
        };
        RedisStoreError::Redis(redis::RedisError::from(error))
    }

    fn refused_for(text: &str) -> Option<String> {
        match as_refusal("tollgate", reply(text)) {
            RedisStoreError::NotPermitted { what, .. } => Some(what),
            _ => None,
        }
    }

    #[test]
    fn every_acl_refusal_counts_in_the_words_of_each_redis_version() {
        // Redis 6 and 7.0.
        let old_keys =
            "NOPERM this user has no permissions to access one of the keys used as arguments";
        // Redis 7.2 and later, and Valkey.
        let new_keys = "NOPERM No permissions to access a key";
        for keys in [old_keys, new_keys] {
            let what = refused_for(keys).expect("a refusal");
            assert!(what.contains("keys under the prefix"), "{what}");
        }
        let evalsha = "NOPERM User alice has no permissions to run the 'evalsha' command";
        assert_eq!(refused_for(evalsha).as_deref(), Some("cannot run EVALSHA"));
        let in_script =
            "ERR ACL failure in script: User alice has no permissions to run the 'set' command";
        assert!(refused_for(in_script)
            .expect("a refusal")
            .contains("scripts run"));
        let unknown = "NOPERM something new";
        assert!(refused_for(unknown).is_some());
        // Not a refusal: left to the failure policy, as without the check.
        assert_eq!(refused_for("CLUSTERDOWN The cluster is down"), None);
        // A command the server has not (rename-command): named, its
        // arguments (a script's hash, a client's keys) not quoted.
        let missing = "ERR unknown command 'EVALSHA', with args beginning with: '1bf9' '3' \
                       'tg:{c:alice}:seen'";
        let redis_6 = "ERR unknown command `SCRIPT`, with args beginning with: `LOAD` `-- common`";
        match as_refusal("tg", reply(redis_6)) {
            e @ RedisStoreError::MissingCommand { .. } => {
                assert!(
                    e.to_string().starts_with("Redis has no command SCRIPT"),
                    "{e}"
                );
            }
            other => panic!("not a missing command: {other:?}"),
        }
        match as_refusal("tg", reply(missing)) {
            e @ RedisStoreError::MissingCommand { .. } => {
                let message = e.to_string();
                assert!(
                    message.starts_with("Redis has no command EVALSHA"),
                    "{message}"
                );
                assert!(
                    !message.contains("alice") && !message.contains("1bf9"),
                    "{message}"
                );
            }
            other => panic!("not a missing command: {other:?}"),
        }
        assert_eq!(refused_for("BUSY Redis is busy running a script"), None);
    }
}
