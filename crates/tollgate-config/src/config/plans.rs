//! `[[plans.NAME]]`, `default_plan` and `[clients]`: the plans and their
//! limits, the plan of clients not listed, and the clients with a plan of
//! their own.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use tollgate::{AnyPolicy, Limit, Plan};
use toml::Spanned;

use super::{file, At, MAX_CLIENT_BYTES};
use crate::Error;

/// The plans of a config, resolved.
pub(super) struct Plans {
    /// Every plan, ordered by name.
    pub plans: Vec<Plan>,
    /// Plan name to its index in `plans`.
    pub index: HashMap<String, usize>,
    /// The index of the plan of clients not in `clients`.
    pub default: usize,
    /// Client id to the index of its plan.
    pub clients: HashMap<String, usize>,
}

pub(super) fn build_plans(file: &file::File, at: &At<'_>) -> Result<Plans, Error> {
    let mut plans = Vec::with_capacity(file.plans.len());
    let mut index = HashMap::new();
    for (name, limits) in &file.plans {
        index.insert(name.clone(), plans.len());
        plans.push(build_plan(name, &limits.get_ref().0, limits.span(), at)?);
    }
    if plans.is_empty() {
        return Err(at(
            0..0,
            "no plans: define at least one, e.g. [[plans.free]] with name, policy, limit and window"
                .to_owned(),
        ));
    }
    let default = build_default_plan(file.default_plan.as_ref(), &index, at)?;
    let clients = build_clients(&file.clients, &index, at)?;
    Ok(Plans {
        plans,
        index,
        default,
        clients,
    })
}

/// `default_plan`: required when there are several plans.
fn build_default_plan(
    name: Option<&Spanned<String>>,
    index: &HashMap<String, usize>,
    at: &At<'_>,
) -> Result<usize, Error> {
    match name {
        Some(name) => find_plan(index, name, "default_plan", at),
        None if index.len() == 1 => Ok(0),
        None => Err(at(
            0..0,
            format!(
                "default_plan is missing: with several plans ({}), say which one clients not listed in [clients] get",
                known(index.keys())
            ),
        )),
    }
}

/// `[clients]`: client id to plan name.
fn build_clients(
    section: &BTreeMap<String, Spanned<String>>,
    index: &HashMap<String, usize>,
    at: &At<'_>,
) -> Result<HashMap<String, usize>, Error> {
    let mut clients = HashMap::with_capacity(section.len());
    for (client, plan) in section {
        if client.is_empty() || client.len() > MAX_CLIENT_BYTES {
            return Err(at(
                plan.span(),
                format!(
                    "client id {client:?} in [clients] must be 1 to {MAX_CLIENT_BYTES} bytes long"
                ),
            ));
        }
        let what = format!("client {client:?}");
        clients.insert(client.clone(), find_plan(index, plan, &what, at)?);
    }
    Ok(clients)
}

/// The index of the plan `name` refers to, or an error at `name` listing
/// the plans there are.
fn find_plan(
    index: &HashMap<String, usize>,
    name: &Spanned<String>,
    what: &str,
    at: &At<'_>,
) -> Result<usize, Error> {
    index.get(name.get_ref()).copied().ok_or_else(|| {
        at(
            name.span(),
            format!(
                "{what} refers to unknown plan {:?}: defined plans are {}",
                name.get_ref(),
                known(index.keys())
            ),
        )
    })
}

fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut names: Vec<&str> = names.map(String::as_str).collect();
    names.sort_unstable();
    names.join(", ")
}

fn build_plan(
    name: &str,
    limits: &[file::LimitSection],
    span: Range<usize>,
    at: &At<'_>,
) -> Result<Plan, Error> {
    if name.is_empty() {
        return Err(at(span, "a plan name must not be empty".to_owned()));
    }
    if let Some(refusal) = control_character(name) {
        return Err(at(span.clone(), format!("plan {name:?}: {refusal}")));
    }
    let mut built = Vec::with_capacity(limits.len());
    for limit in limits {
        let limit_name = limit.name.get_ref();
        if limit_name.is_empty() {
            return Err(at(
                limit.name.span(),
                "a limit name must not be empty".to_owned(),
            ));
        }
        if let Some(refusal) = control_character(limit_name) {
            return Err(at(
                limit.name.span(),
                format!("plan {name:?}, limit {limit_name:?}: {refusal}"),
            ));
        }
        if built.iter().any(|l: &Limit| l.name() == limit_name) {
            return Err(at(
                limit.name.span(),
                format!("plan {name:?} names the limit {limit_name:?} twice"),
            ));
        }
        let count = u32::try_from(*limit.limit.get_ref()).map_err(|_| {
            let got = limit.limit.get_ref();
            let message = format!("limit must be from 1 to {} (got {got})", u32::MAX);
            at(
                limit.limit.span(),
                format!("plan {name:?}, limit {limit_name:?}: {message}"),
            )
        })?;
        let policy = AnyPolicy::from_name(limit.policy.get_ref(), count, limit.window.get_ref().0)
            .map_err(|e| {
                let span = match e {
                    tollgate::Error::UnknownPolicy { .. } => limit.policy.span(),
                    tollgate::Error::ZeroLimit => limit.limit.span(),
                    _ => limit.window.span(),
                };
                at(span, format!("plan {name:?}, limit {limit_name:?}: {e}"))
            })?;
        built.push(Limit::new(limit_name.as_str(), policy, limit.shadow));
    }
    Plan::new(name, built).map_err(|e| at(span, e.to_string()))
}

/// Why `name` (a plan's or a limit's) is refused, when it holds a control
/// character (C0 such as CR, LF, tab and ESC, DEL, C1): names go into HTTP
/// headers (the RateLimit fields, Envoy's `x-ratelimit-*`), logs and
/// terminals, where such a character splits a header or forges a line.
fn control_character(name: &str) -> Option<String> {
    let c = name.chars().find(|c| c.is_control())?;
    Some(format!(
        "its name holds the control character {c:?} (U+{:04X}); names are written into HTTP \
         headers, logs and terminals, so control characters (CR, LF, tab, ESC, the other C0 \
         and C1 characters, DEL) are refused",
        u32::from(c)
    ))
}
