//! The layer driven in-process with `tower::ServiceExt::oneshot`: every
//! answer it gives, with the clock moved by hand.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tollgate::testing::FailingStore;
use tollgate::{
    AnyPolicy, FailurePolicy, Limit, ManualClock, MemoryBackend, Plan, PlanDecision, Store,
    StoreFuture,
};
use tollgate_guard::GuardedStore;
use tollgate_tower::{
    Cost, HeaderKey, MissingKey, Plans, RateLimitConfig, RateLimitLayer, Refusal, RefusalBody,
    ResponseBody,
};
use tower::{service_fn, Layer, Service, ServiceExt};

fn plan() -> Plan {
    Plan::new(
        "free",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 2, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap()
}

fn config(clock: &Arc<ManualClock>) -> RateLimitConfig {
    RateLimitConfig::new(plan(), Arc::new(MemoryBackend::new()), clock.clone())
}

fn layer(config: RateLimitConfig) -> RateLimitLayer<HeaderKey> {
    RateLimitLayer::new(
        config,
        HeaderKey::new(HeaderName::from_static("x-client-id")),
    )
}

async fn ok_service(_: Request<()>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"inner"))))
}

fn request(client: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().uri("/");
    if let Some(client) = client {
        builder = builder.header("x-client-id", client);
    }
    builder.body(()).unwrap()
}

async fn text(response: Response<ResponseBody<Full<Bytes>>>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn header<'a>(response: &'a Response<ResponseBody<Full<Bytes>>>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn allows_up_to_the_limit_then_429_with_headers_until_the_window_moves() {
    let clock = Arc::new(ManualClock::new(10_000));
    let service = layer(config(&clock)).layer(service_fn(ok_service));

    let first = service.clone().oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""free-1s";q=2;w=1"#)
    );
    assert_eq!(header(&first, "ratelimit"), Some(r#""free-1s";r=1;t=1"#));
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(text(first).await, "inner");

    clock.advance(400);
    let second = service.clone().oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(header(&second, "ratelimit"), Some(r#""free-1s";r=0;t=1"#));

    clock.advance(100);
    let third = service.clone().oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    // The first request leaves the window at 11_000, 500 ms from now.
    assert_eq!(header(&third, "retry-after"), Some("1"));
    assert_eq!(header(&third, "ratelimit"), Some(r#""free-1s";r=0;t=1"#));
    assert_eq!(
        header(&third, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(text(third).await, "rate limit exceeded: retry in 1 s\n");

    // Another client has its own budget.
    let other = service.clone().oneshot(request(Some("b"))).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);

    clock.set(11_000);
    let later = service.clone().oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(later.status(), StatusCode::OK);
}

#[tokio::test]
async fn clones_and_layered_services_share_one_budget() {
    let clock = Arc::new(ManualClock::new(0));
    let layer = layer(config(&clock));
    let mut one = layer.layer(service_fn(ok_service));
    let mut two = layer.clone().layer(service_fn(ok_service));
    let mut three = one.clone();
    let mut statuses = Vec::new();
    for service in [&mut one, &mut two, &mut three] {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(Some("a")))
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[tokio::test]
async fn a_rejected_request_never_reaches_the_inner_service() {
    let clock = Arc::new(ManualClock::new(0));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = {
        let calls = calls.clone();
        service_fn(move |r: Request<()>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ok_service(r)
        })
    };
    let service = layer(config(&clock)).layer(counted);
    for _ in 0..5 {
        service.clone().oneshot(request(Some("a"))).await.unwrap();
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn missing_key_is_400_by_default_or_passes_through_without_headers() {
    let clock = Arc::new(ManualClock::new(0));
    let strict = layer(config(&clock)).layer(service_fn(ok_service));
    let response = strict.oneshot(request(None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    // The body names the header looked for.
    assert_eq!(
        text(response).await,
        "missing x-client-id header: it carries the client id\n"
    );

    let lenient =
        layer(config(&clock).on_missing_key(MissingKey::Allow)).layer(service_fn(ok_service));
    for _ in 0..3 {
        let response = lenient.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
}

/// A key header given twice (or too long) names no client: refused, and never counted
/// as "no key" (which `MissingKey::Allow` lets through unlimited, so a
/// client could skip its limit by sending its key twice).
#[tokio::test]
async fn a_key_header_given_twice_is_refused_even_when_keyless_requests_pass() {
    let clock = Arc::new(ManualClock::new(0));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = || {
        let calls = calls.clone();
        service_fn(move |r: Request<()>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ok_service(r)
        })
    };
    for policy in [MissingKey::Reject, MissingKey::Allow] {
        let service = layer(config(&clock).on_missing_key(policy)).layer(counted());
        let mut twice = request(Some("a"));
        twice
            .headers_mut()
            .append("x-client-id", http::HeaderValue::from_static("b"));
        let response = service.oneshot(twice).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{policy:?}");
        assert_eq!(
            text(response).await,
            "the x-client-id header is given more than once: it must name one client\n"
        );
        // So is a key longer than a client id may be (serve's cap).
        let long = "k".repeat(tollgate::MAX_CLIENT_BYTES + 1);
        let service = layer(config(&clock).on_missing_key(policy)).layer(counted());
        let response = service.oneshot(request(Some(&long))).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{policy:?}");
        assert!(text(response).await.contains("257 bytes long"));
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn store_errors_follow_the_guards_policy() {
    let clock = Arc::new(ManualClock::new(0));
    let down = |policy| {
        let store = GuardedStore::new(FailingStore::down(), Duration::from_secs(1), policy);
        layer(RateLimitConfig::new(plan(), Arc::new(store), clock.clone()))
            .layer(service_fn(ok_service))
    };
    let cases = [
        (FailurePolicy::Unavailable, StatusCode::SERVICE_UNAVAILABLE),
        (FailurePolicy::FailOpen, StatusCode::OK),
        (FailurePolicy::FailClosed, StatusCode::TOO_MANY_REQUESTS),
    ];
    for (policy, status) in cases {
        let response = down(policy).oneshot(request(Some("a"))).await.unwrap();
        assert_eq!(response.status(), status, "{policy:?}");
    }
    // An unguarded store's error is a 503 without rate-limit numbers.
    let bare = RateLimitConfig::new(plan(), Arc::new(FailingStore::down()), clock.clone());
    let response = layer(bare)
        .layer(service_fn(ok_service))
        .oneshot(request(Some("a")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "ratelimit"), None);
}

#[tokio::test]
async fn headers_on_allowed_responses_can_be_turned_off() {
    let clock = Arc::new(ManualClock::new(0));
    let service = layer(config(&clock).headers_on_allowed(false)).layer(service_fn(ok_service));
    let allowed = service.clone().oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(header(&allowed, "ratelimit"), None);
    service.clone().oneshot(request(Some("a"))).await.unwrap();
    let rejected = service.oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(rejected.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&rejected, "ratelimit").is_some());
}

#[tokio::test]
async fn the_refusal_body_is_customisable() {
    let clock = Arc::new(ManualClock::new(0));
    let config = config(&clock).refusal_body(|refusal| match refusal {
        Refusal::RateLimited { plan, decision } => RefusalBody::json(format!(
            r#"{{"plan":"{}","retry_after_ms":{}}}"#,
            plan.name(),
            decision.retry_after_ms.unwrap_or(0)
        )),
        _ => RefusalBody::text("other"),
    });
    let service = layer(config).layer(service_fn(ok_service));
    service.clone().oneshot(request(Some("a"))).await.unwrap();
    clock.advance(250);
    service.clone().oneshot(request(Some("a"))).await.unwrap();
    let rejected = service.oneshot(request(Some("a"))).await.unwrap();
    assert_eq!(header(&rejected, "content-type"), Some("application/json"));
    assert_eq!(
        text(rejected).await,
        r#"{"plan":"free","retry_after_ms":750}"#
    );
}

#[tokio::test]
async fn cost_comes_from_the_request_extensions() {
    let clock = Arc::new(ManualClock::new(0));
    let service = layer(config(&clock)).layer(service_fn(ok_service));
    let mut heavy = request(Some("a"));
    heavy.extensions_mut().insert(Cost(2));
    let response = service.clone().oneshot(heavy).await.unwrap();
    assert_eq!(header(&response, "ratelimit"), Some(r#""free-1s";r=0;t=1"#));
    let mut too_heavy = request(Some("b"));
    too_heavy.extensions_mut().insert(Cost(3));
    let response = service.oneshot(too_heavy).await.unwrap();
    // More than the limit: rejected, and no Retry-After since waiting cannot help.
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), None);
}

/// A store whose own failure policy answers (as the Redis store does when
/// Redis is down): the layer applies that decision like any other.
struct FailPolicyStore {
    allowed: bool,
}

impl Store for FailPolicyStore {
    fn check<'a>(
        &'a self,
        _: &'a Plan,
        _: &'a str,
        _: u64,
        _: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        let decision = PlanDecision {
            allowed: self.allowed,
            retry_after_ms: if self.allowed { Some(0) } else { Some(1_000) },
            limits: Vec::new(),
            decided_by: if self.allowed {
                tollgate::DecidedBy::Failure(tollgate::FailurePolicy::FailOpen)
            } else {
                tollgate::DecidedBy::Failure(tollgate::FailurePolicy::FailClosed)
            },
        };
        StoreFuture::ready(Ok(decision))
    }
}

#[tokio::test]
async fn a_store_failure_policy_decision_is_applied_as_it_is() {
    let clock = Arc::new(ManualClock::new(0));
    for (allowed, status) in [
        (true, StatusCode::OK),
        (false, StatusCode::TOO_MANY_REQUESTS),
    ] {
        let config =
            RateLimitConfig::new(plan(), Arc::new(FailPolicyStore { allowed }), clock.clone());
        let response = layer(config)
            .layer(service_fn(ok_service))
            .oneshot(request(Some("a")))
            .await
            .unwrap();
        assert_eq!(response.status(), status);
        // No limit numbers to report, but a rejection still says when to come back.
        assert_eq!(header(&response, "ratelimit"), None);
        let retry = if allowed { None } else { Some("1") };
        assert_eq!(header(&response, "retry-after"), retry);
    }
}

#[tokio::test]
async fn keys_with_a_plan_of_their_own_are_limited_by_it() {
    let clock = Arc::new(ManualClock::new(10_000));
    let paid = Plan::new(
        "paid",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 4, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    let config = config(&clock).plans_by_key([("acme".to_owned(), paid)].into_iter().collect());
    let service = layer(config).layer(service_fn(ok_service));
    let mut statuses = Vec::new();
    for client in ["acme", "bob"] {
        for _ in 0..5 {
            let response = service
                .clone()
                .oneshot(request(Some(client)))
                .await
                .unwrap();
            statuses.push((client, response.status().as_u16()));
            if client == "acme" {
                assert!(header(&response, "ratelimit-policy")
                    .unwrap()
                    .starts_with("\"paid-1s\""));
            }
        }
    }
    let allowed = |who: &str| {
        statuses
            .iter()
            .filter(|(c, s)| *c == who && *s == 200)
            .count()
    };
    // acme on its own plan (4 per second), everyone else on the default (2).
    assert_eq!((allowed("acme"), allowed("bob")), (4, 2));
}

#[tokio::test]
async fn replaced_plans_reach_every_clone_and_unchanged_limits_keep_their_counts() {
    let clock = Arc::new(ManualClock::new(10_000));
    let config = config(&clock);
    let handle = config.plans_handle();
    let service = layer(config).layer(service_fn(ok_service));
    let other_clone = service.clone();
    let status = |service: &_, client: &'static str| {
        let service: &tollgate_tower::RateLimit<_, HeaderKey> = service;
        let service = service.clone();
        async move {
            service
                .oneshot(request(Some(client)))
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(status(&service, "a").await, StatusCode::OK);
    assert_eq!(status(&service, "b").await, StatusCode::OK);
    assert_eq!(status(&service, "b").await, StatusCode::OK);

    // "a" moves to a plan of its own (3 a second, a new limit); "b" stays
    // on the unchanged default (2 a second, both used).
    let own = Plan::new(
        "own",
        vec![Limit::new(
            "1s",
            AnyPolicy::from_name("sliding-window", 3, 1_000).unwrap(),
            false,
        )],
    )
    .unwrap();
    handle.replace(Plans::new(plan()).with_keys([("a".to_owned(), own)].into_iter().collect()));
    assert_eq!(
        status(&other_clone, "b").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let a = [
        status(&other_clone, "a").await,
        status(&service, "a").await,
        status(&other_clone, "a").await,
        status(&service, "a").await,
    ];
    assert_eq!(
        a,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
