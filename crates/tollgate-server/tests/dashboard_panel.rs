//! The dashboard's client panel in a real headless Chromium: what a search
//! or a click on a top client shows.

mod common;

use std::time::Duration;

use common::TestServer;
use tollgate_testkit::browser::fantoccini::Locator;
use tollgate_testkit::browser::Browser;

const WITH_PRO: &str = r#"
default_plan = "free"

[clients]
acme = "pro"

[[plans.free]]
name = "1m"
policy = "sliding-window"
limit = 5
window = "1m"

[[plans.pro]]
name = "1s"
policy = "gcra"
limit = 3
window = "1s"
"#;

/// The same without `pro` (and so without `acme`'s entry, which names it).
const WITHOUT_PRO: &str = r#"
default_plan = "free"

[[plans.free]]
name = "1m"
policy = "sliding-window"
limit = 5
window = "1m"
"#;

/// The client panel's text, for a failed assertion's message.
async fn panel_text(browser: &Browser) -> String {
    let panel = browser.client().find(Locator::Id("client")).await;
    let panel = panel.expect("the client panel");
    panel.text().await.expect("its text")
}

/// After a reload that removed a plan, the top clients still list a client
/// under the plan of its latest request in the last minute, and a click on
/// that row shows the client on the plan it has now, saying why (it showed
/// the API's "unknown plan" error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_client_of_a_removed_plan_is_shown_on_its_plan_now() {
    let Some(browser) = Browser::start("dashboard_removed_plan", 1280, 1000).await else {
        return;
    };
    let t = TestServer::start(WITH_PRO).await;
    for _ in 0..5 {
        t.server.decide("acme", None, 1).await.expect("decided");
    }
    t.write_config(WITHOUT_PRO);
    t.server.reload().expect("reloaded");

    let b = browser.client();
    b.goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    let wait = Duration::from_secs(15);
    let row = "#top tbody tr[data-client=\"acme\"]";
    let listed = browser
        .wait_until(
            &format!(
                "const row = document.querySelector('{row}'); \
                 return !!row && row.textContent.includes('pro');"
            ),
            wait,
        )
        .await;
    assert!(listed, "acme is listed under the plan it was limited on");
    // Found and clicked in one script: the table is redrawn every second.
    b.execute(
        "document.querySelector(arguments[0]).click();",
        vec![serde_json::json!(row)],
    )
    .await
    .expect("clicked");
    let shown = browser
        .wait_until(
            "const head = document.querySelector('#client .client-head'); \
             const note = document.querySelector('#client .plan-gone'); \
             return !!head && head.textContent.startsWith('acme on plan free') \
             && !!note && note.textContent.includes('Plan pro is no longer configured') \
             && !!document.querySelector('#client .gauge[data-limit=\"1m\"]');",
            wait,
        )
        .await;
    let panel = panel_text(&browser).await;
    assert!(shown, "acme shown on its plan now: {panel}");
    // The note stays through the page's refreshes (once a second, each
    // drawing the panel anew).
    b.execute(
        "window.firstNote = document.querySelector('#client .plan-gone');",
        vec![],
    )
    .await
    .expect("noted");
    let kept = browser
        .wait_until(
            "const note = document.querySelector('#client .plan-gone'); \
             return !!note && note !== window.firstNote;",
            wait,
        )
        .await;
    assert!(kept, "the note stays after refreshes");
    browser.finish().await;
    t.stop().await;
}

/// An id is searched for as typed, spaces included: ids are their callers'
/// to choose, and " lead" is not "lead" (the search box trimmed it, and
/// showed another client's full quota for a limited one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finds_the_id_as_typed_spaces_included() {
    let Some(browser) = Browser::start("dashboard_search_spaces", 1280, 1000).await else {
        return;
    };
    let t = TestServer::start(WITHOUT_PRO).await;
    for _ in 0..7 {
        t.server.decide(" lead", None, 1).await.expect("decided");
    }
    let b = browser.client();
    b.goto(&format!("{}/", t.base))
        .await
        .expect("the page opens");
    b.execute(
        "document.getElementById('client-id').value = ' lead'; \
         document.getElementById('search').requestSubmit();",
        vec![],
    )
    .await
    .expect("searched");
    let shown = browser
        .wait_until(
            "const gauge = document.querySelector('#client .gauge[data-limit=\"1m\"]'); \
             return document.getElementById('client').dataset.client === ' lead' \
             && !!gauge && gauge.dataset.remaining === '0';",
            Duration::from_secs(15),
        )
        .await;
    let panel = panel_text(&browser).await;
    assert!(shown, "\" lead\" shown with its quota spent: {panel}");
    // Its leading space shown too: " lead" must not read as "lead", another
    // client (HTML collapses white space unless told not to).
    let head = b
        .execute(
            "return document.querySelector('#client .client-head .client-id').innerText;",
            vec![],
        )
        .await
        .expect("the id's text");
    assert_eq!(head, serde_json::json!(" lead"), "{panel}");
    // And drawn between quotes, so that " lead" and "trail " stand apart
    // from "lead" and "trail" (a trailing space is invisible otherwise).
    let quoted = b
        .execute(
            "const id = document.querySelector('#client .client-head .client-id'); \
             return getComputedStyle(id, '::before').content + getComputedStyle(id, '::after').content;",
            vec![],
        )
        .await
        .expect("the quotes");
    assert_eq!(quoted, serde_json::json!("\"\\\"\"\"\\\"\""), "{panel}");
    browser.finish().await;
    t.stop().await;
}
