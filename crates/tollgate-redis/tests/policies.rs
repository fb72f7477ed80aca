//! The policy descriptors against a real Redis: each policy's bound in Rust
//! (`RedisPolicy::bound`) and in its Lua file (`bound_ok`) refuse exactly the
//! same times, so nothing the store lets through is refused by the script
//! and nothing the script would round is let through.

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::bounds::{self, MAX_EXACT};
use tollgate_redis::policies::POLICIES;
use tollgate_redis::testing::RedisServer;

/// The latest `now` at which `bound` holds for `limit` per `window` (binary search).
fn edge(largest: fn(u128, u128, u128) -> u128, limit: u32, window: u64) -> u64 {
    let (mut lo, mut hi) = (0u64, MAX_EXACT);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if largest(u128::from(mid), u128::from(limit), u128::from(window)) <= u128::from(MAX_EXACT)
        {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[test]
fn rust_and_lua_bounds_agree_at_the_edge() {
    let Some(server) = RedisServer::spawn("rust_and_lua_bounds_agree_at_the_edge") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let script = redis::Script::new(tollgate_redis::scripts::PLAN);
        let client = redis::Client::open(server.url()).expect("client");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let mut calls = 0u32;
        for policy in POLICIES {
            for (limit, window) in [(4, 1_000), (1_000, 60_000), (3, 3)] {
                let core = AnyPolicy::from_name(policy.name, limit, window).expect("policy");
                let plan = Plan::new("p", vec![Limit::new("l", core, false)]).expect("plan");
                let at = edge(policy.bound.largest, limit, window);
                assert!(bounds::check(&plan, Some(at), 0).is_ok());
                assert!(bounds::check(&plan, Some(at + 1), 0).is_err());
                for (now, ok) in [(at, true), (at + 1, false)] {
                    calls += 1;
                    let mut invocation = script.key(format!("edge:{{c:{calls}}}:seen"));
                    invocation.key(format!("edge:{{c:{calls}}}:1"));
                    invocation.key(format!("edge:{{c:{calls}}}:receipts"));
                    invocation
                        .arg(now)
                        .arg(1)
                        .arg(0)
                        .arg(MAX_EXACT) // deadline: far ahead
                        .arg(policy.code)
                        .arg(limit)
                        .arg(window)
                        .arg(0)
                        .arg(format!("ab:{calls}")) // receipt id
                        .arg(0); // watermark
                    let reply: Result<Vec<i64>, _> = invocation.invoke_async(&mut connection).await;
                    match reply {
                        Ok(_) => assert!(ok, "{} at {now}: the script let it through", policy.name),
                        Err(e) => {
                            assert!(!ok, "{} at {now}: {e}", policy.name);
                            assert_eq!(e.code(), Some("TOLLGATE"), "{e}");
                            assert!(e.to_string().contains("exact range"), "{e}");
                        }
                    }
                }
            }
        }
    });
}
