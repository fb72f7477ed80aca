//! Rules: which Envoy descriptors are limited, by which plan, and per what.
//!
//! Envoy sends a `domain` and a list of descriptors, each a list of
//! `key`/`value` entries (built by the route's `rate_limits` actions, e.g.
//! `remote_address`, `request_headers`, `generic_key`). A rule names a domain,
//! the entries a descriptor must have (same keys, same order, same length),
//! and the plan that limits it:
//!
//! ```toml
//! # One budget per client address.
//! [[rules]]
//! domain = "edge"
//! descriptor = [{ key = "remote_address" }]
//! plan = "per-ip"
//!
//! # Logins: one budget per client address, for the path /login only.
//! [[rules]]
//! domain = "edge"
//! descriptor = [{ key = "path", value = "/login" }, { key = "remote_address" }]
//! plan = "login"
//!
//! # One budget shared by everyone sending this generic key.
//! [[rules]]
//! domain = "edge"
//! descriptor = [{ key = "generic_key", value = "expensive" }]
//! plan = "shared"
//! ```
//!
//! As in Envoy's own rate limit service, an entry with a `value` matches only
//! that value, and an entry without one matches any value and counts each
//! distinct value separately. The client key is the domain plus every entry
//! of the descriptor, so `{path=/login, remote_address=1.2.3.4}` and
//! `{path=/login, remote_address=5.6.7.8}` are two clients, while every
//! descriptor `{generic_key=expensive}` is the same one. When several rules
//! match a descriptor, the one with the most fixed values wins (ties: the
//! first in the file). A descriptor no rule matches is not limited.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use tollgate::Plan;

use crate::Error;

/// The rules section as written in a config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// The rules, in order.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// One rule as written in a config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The Envoy rate limit domain the rule belongs to.
    pub domain: String,
    /// The entries a descriptor must have, in order.
    pub descriptor: Vec<EntryConfig>,
    /// The name of the plan that limits matching descriptors.
    pub plan: String,
}

/// One descriptor entry of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryConfig {
    /// The entry's key (e.g. `remote_address`, `generic_key`, a header descriptor key).
    pub key: String,
    /// The value to match; absent: any value, one limit per distinct value.
    #[serde(default)]
    pub value: Option<String>,
}

impl RulesConfig {
    /// Parses the rules from TOML (a file with `[[rules]]` tables).
    ///
    /// # Errors
    /// [`Error::Config`] naming the line and what is wrong.
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }
}

/// A checked rule, with its plan resolved.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    domain: String,
    entries: Vec<EntryConfig>,
    pub(crate) plan: Arc<Plan>,
    specificity: usize,
}

/// The checked rules, ready for matching.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Checks `config` against the known `plans`.
    ///
    /// # Errors
    /// [`Error::Rule`] for an empty domain, an empty descriptor, an empty
    /// key, a plan that does not exist, or two rules matching exactly the
    /// same descriptors (the second could never apply).
    pub fn new(config: RulesConfig, plans: &[Plan]) -> Result<Self, Error> {
        let by_name: HashMap<&str, Arc<Plan>> = plans
            .iter()
            .map(|p| (p.name(), Arc::new(p.clone())))
            .collect();
        let mut rules: Vec<Rule> = Vec::with_capacity(config.rules.len());
        for (index, rule) in config.rules.into_iter().enumerate() {
            let number = index + 1;
            let fail = |message: String| Error::Rule { number, message };
            if rule.domain.is_empty() {
                return Err(fail("domain is empty".into()));
            }
            if rule.descriptor.is_empty() {
                return Err(fail("descriptor has no entries".into()));
            }
            if rule.descriptor.iter().any(|e| e.key.is_empty()) {
                return Err(fail("a descriptor entry has an empty key".into()));
            }
            let Some(plan) = by_name.get(rule.plan.as_str()) else {
                let mut known: Vec<&str> = by_name.keys().copied().collect();
                known.sort_unstable();
                return Err(fail(format!(
                    "unknown plan {:?} (known plans: {})",
                    rule.plan,
                    known.join(", ")
                )));
            };
            if let Some(earlier) = rules
                .iter()
                .position(|r| r.domain == rule.domain && r.entries == rule.descriptor)
            {
                return Err(fail(format!(
                    "matches the same descriptors as rule {}",
                    earlier + 1
                )));
            }
            let specificity = rule.descriptor.iter().filter(|e| e.value.is_some()).count();
            rules.push(Rule {
                domain: rule.domain,
                entries: rule.descriptor,
                plan: plan.clone(),
                specificity,
            });
        }
        Ok(Self { rules })
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// The plan of each rule, in the rules' order.
    pub fn plan_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.rules.iter().map(|rule| rule.plan.name())
    }

    /// Whether there are no rules (every descriptor is then unlimited).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule for a descriptor of `domain` with `entries` (key, value):
    /// the matching rule with the most fixed values, the first on a tie.
    pub(crate) fn find<'a>(
        &self,
        domain: &str,
        entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Option<&Rule> {
        let mut best: Option<&Rule> = None;
        for rule in self.rules.iter().filter(|r| r.domain == domain) {
            let mut wanted = rule.entries.iter();
            let mut given = entries.clone();
            let matches = loop {
                match (wanted.next(), given.next()) {
                    (None, None) => break true,
                    (Some(w), Some((key, value))) => {
                        if w.key != key || w.value.as_deref().is_some_and(|v| v != value) {
                            break false;
                        }
                    }
                    _ => break false,
                }
            };
            if matches && best.is_none_or(|b| rule.specificity > b.specificity) {
                best = Some(rule);
            }
        }
        best
    }
}

/// The store's client key for a descriptor: the domain and every entry,
/// with `\`, `|` and `=` escaped so that different descriptors never share a key.
/// A key longer than a client id may be ([`tollgate::MAX_CLIENT_BYTES`]:
/// each is kept with its state) is shortened by [`shorten`].
pub(crate) fn client_key<'a>(
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut key = String::with_capacity(64);
    escape_into(&mut key, domain);
    for (k, v) in entries {
        key.push('|');
        escape_into(&mut key, k);
        key.push('=');
        escape_into(&mut key, v);
    }
    if key.len() > tollgate::MAX_CLIENT_BYTES {
        key = shorten(&key);
    }
    key
}

/// A long key as its start and the SHA-256 of the whole, in
/// [`tollgate::MAX_CLIENT_BYTES`]: a descriptor value is often the caller's
/// own (a header, a path), so a key of any length would let one caller
/// hold any memory, while refusing it would hand the request to Envoy's
/// failure mode (by default, let through). Two long keys share a shortened
/// key only if their SHA-256 digests collide; a short key could equal a
/// shortened one only by spelling out its digest, which takes the long key
/// itself. Every instance shortens alike, so a fleet still shares a limit.
fn shorten(key: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    const DIGEST_HEX: usize = 64;
    let keep = tollgate::MAX_CLIENT_BYTES - 1 - DIGEST_HEX;
    let mut cut = keep;
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut short = String::with_capacity(tollgate::MAX_CLIENT_BYTES);
    short.push_str(&key[..cut]);
    short.push('#');
    for byte in Sha256::digest(key.as_bytes()) {
        let _ = write!(short, "{byte:02x}");
    }
    short
}

/// Appends `s` with `\`, `|` and `=` escaped, copying the runs between
/// them whole (most values have none).
fn escape_into(out: &mut String, s: &str) {
    let mut rest = s;
    while let Some(at) = rest.find(['\\', '|', '=']) {
        out.push_str(&rest[..at]);
        out.push('\\');
        // The three are ASCII: one byte each.
        out.push_str(&rest[at..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{AnyPolicy, Limit};

    fn plan(name: &str) -> Plan {
        Plan::new(
            name,
            vec![Limit::new(
                "1s",
                AnyPolicy::from_name("gcra", 1, 1_000).unwrap(),
                false,
            )],
        )
        .unwrap()
    }

    fn rules(text: &str) -> Result<Rules, Error> {
        Rules::new(RulesConfig::from_toml(text)?, &[plan("a"), plan("b")])
    }

    #[test]
    fn most_specific_rule_wins_and_lengths_must_agree() {
        let rules = rules(
            r#"
            [[rules]]
            domain = "d"
            descriptor = [{ key = "user" }]
            plan = "a"
            [[rules]]
            domain = "d"
            descriptor = [{ key = "user", value = "vip" }]
            plan = "b"
            "#,
        )
        .unwrap();
        let find = |domain, entries: &[(&'static str, &'static str)]| {
            rules
                .find(domain, entries.iter().copied())
                .map(|r| r.plan.name().to_owned())
        };
        assert_eq!(find("d", &[("user", "joe")]).as_deref(), Some("a"));
        assert_eq!(find("d", &[("user", "vip")]).as_deref(), Some("b"));
        assert_eq!(find("other", &[("user", "joe")]), None);
        assert_eq!(find("d", &[("user", "joe"), ("path", "/")]), None);
        assert_eq!(find("d", &[]), None);
    }

    #[test]
    fn bad_rules_are_refused_with_their_number() {
        let err =
            rules("[[rules]]\ndomain = \"d\"\ndescriptor = [{ key = \"k\" }]\nplan = \"nope\"\n")
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "rule 1: unknown plan \"nope\" (known plans: a, b)"
        );
        let twice = "[[rules]]\ndomain = \"d\"\ndescriptor = [{ key = \"k\" }]\nplan = \"a\"\n";
        let err = rules(&format!("{twice}{twice}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rule 2: matches the same descriptors as rule 1"
        );
        let err = rules("[[rules]]\ndomain = \"\"\ndescriptor = [{ key = \"k\" }]\nplan = \"a\"\n")
            .unwrap_err();
        assert_eq!(err.to_string(), "rule 1: domain is empty");
        let err = rules("[[rules]]\ndomain = \"d\"\ndescriptor = []\nplan = \"a\"\n").unwrap_err();
        assert_eq!(err.to_string(), "rule 1: descriptor has no entries");
    }

    #[test]
    fn toml_mistakes_name_the_line() {
        let err =
            rules("[[rules]]\ndomain = \"d\"\ndescriptor = [{ key = \"k\" }]\nplna = \"a\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("line 4"), "{err}");
    }

    #[test]
    fn the_example_rules_load() {
        let config = RulesConfig::from_toml(include_str!("../examples/rules.toml")).unwrap();
        let rules = Rules::new(config, &[plan("per-ip"), plan("per-key"), plan("login")]).unwrap();
        assert_eq!(rules.len(), 3);
        let login = rules
            .find(
                "edge",
                [("generic_key", "login"), ("remote_address", "1.2.3.4")].into_iter(),
            )
            .unwrap();
        assert_eq!(login.plan.name(), "login");
    }

    #[test]
    fn client_keys_escape_every_separator_and_keep_other_characters() {
        let key = client_key("é\\d", [("k|", "a==b"), ("ü", "")].into_iter());
        assert_eq!(key, r"é\\d|k\|=a\=\=b|ü=");
    }

    #[test]
    fn a_long_key_is_shortened_to_a_client_ids_length_and_stays_its_own() {
        let long = |tail: &str| {
            let value = format!("{}{tail}", "é".repeat(200));
            client_key("edge", [("path", value.as_str())].into_iter())
        };
        let (one, same, other) = (long("a"), long("a"), long("b"));
        assert!(one.len() <= tollgate::MAX_CLIENT_BYTES, "{}", one.len());
        assert!(one.starts_with("edge|path=é"), "{one}");
        assert_eq!(one, same, "the same descriptor, the same key");
        assert_ne!(one, other, "a different tail, a different key");
        // A key that fits is kept whole.
        let fits = "v".repeat(tollgate::MAX_CLIENT_BYTES - "edge|path=".len());
        let key = client_key("edge", [("path", fits.as_str())].into_iter());
        assert_eq!(key, format!("edge|path={fits}"));
    }

    #[test]
    fn client_keys_cannot_collide_through_separators() {
        let one = client_key("d", [("a", "b|c=d")].into_iter());
        let two = client_key("d", [("a", "b"), ("c", "d")].into_iter());
        assert_ne!(one, two);
        assert_eq!(two, "d|a=b|c=d");
    }
}
