//! The web console (`/ui`) in a real browser: Debian's Chromium, headless, driven over WebDriver
//! (chromedriver, through the `fantoccini` crate) against a real `stockd serve`.
//!
//! One test, two servers, one browser: on a server without tokens it creates a pool through the
//! console's admin form, makes holds through the API and watches the bars' numbers change, opens
//! the pool page and watches its events arrive, restocks there, looks up a hold and follows its
//! history and its times (whole date and UTC offset, in a time zone that is not UTC), extends,
//! releases and confirms stuck holds from their page (each checked through the API) and shows a
//! refund the server refuses, pauses and resumes the live feed, deletes the pool, and shows a
//! segmented pool's count (in the list and on its page) and its segments' table; on a
//! server with tokens it is asked for a token, refuses a wrong one, learns that a client token
//! may not write pools (and hides those actions) but may act on holds, and lets an admin token
//! write pools.
//!
//! Chromium and chromedriver are Debian's `chromium` and `chromium-driver` (scripts/test.sh
//! installs them and sets `STOCKD_REQUIRE_BROWSER=1`, so that there the test cannot skip).
//! Under a plain `cargo test` on a machine without them, the test says loudly that it skipped.
//! With `STOCKD_CONSOLE_SCREENSHOTS=DIR` (relative to the workspace root, e.g. `docs/img`) it
//! saves the screenshots docs/operations.md shows.

mod support;

use std::future::Future;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use support::*;

/// How long the page may take to show what the test waits for. The console polls every second;
/// a debug build on a busy 2-core machine can be slow.
const WAIT: Duration = Duration::from_secs(15);
/// How long chromedriver may take to answer its status.
const DRIVER_READY: Duration = Duration::from_secs(20);
/// The flags this machine's Chromium needs headless (docs/testing.md): no sandbox as root, no
/// GPU, and no background connections to the internet.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
];
/// The browser's time zone (chromedriver's and so Chromium's `TZ`): behind UTC, and half an
/// hour off the hour, so that a time shown without its zone, or with a wrong offset, is seen.
const BROWSER_TIME_ZONE: &str = "Pacific/Marquesas";
/// Its UTC offset, as the console shows it (the zone has no daylight saving time).
const BROWSER_UTC_OFFSET: &str = "-09:30";

#[tokio::test]
async fn the_console_in_a_real_browser() {
    let Some(programs) = browser_programs() else {
        assert!(
            std::env::var("STOCKD_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "STOCKD_REQUIRE_BROWSER=1 but chromium or chromedriver is missing \
             (Debian: apt-get install chromium chromium-driver)"
        );
        // Straight to stderr, not eprintln!: the test harness hides what a passing test prints.
        let _ = writeln!(
            std::io::stderr(),
            "\n======== SKIPPED the_console_in_a_real_browser: chromium and chromedriver are \
             not installed (Debian: apt-get install chromium chromium-driver; scripts/test.sh \
             installs them and does not skip) ========\n"
        );
        return;
    };
    let started = Instant::now();
    let browser = Browser::start(&programs).await;
    without_tokens(&browser).await;
    with_tokens(&browser).await;
    browser
        .client
        .clone()
        .close()
        .await
        .expect("close the session");
    eprintln!("the console's browser test took {:?}", started.elapsed());
}

/// A server without tokens: everything an operator does on sale day.
async fn without_tokens(browser: &Browser) {
    // A small feed window, so that a burst can outrun the console (at the end).
    let config = ServerConfig::default()
        .arg("--event-retention-max")
        .arg("50");
    let server = Server::start_with(config).await;
    let api = server.api();
    // Some context for the bars (and the screenshots).
    seed(
        &api,
        "coupon-spring",
        json!({"total": 500}),
        &[("c", 420, true)],
    )
    .await;
    seed(
        &api,
        "team-42",
        json!({"total": 5, "per_user_limit": 1}),
        &[("t1", 1, true), ("t2", 1, true), ("t3", 1, false)],
    )
    .await;
    seed(
        &api,
        "sku-blue-shoe",
        json!({"total": 40}),
        &[("b", 12, false)],
    )
    .await;

    let page = &browser.client;
    page.goto(&format!("{}/ui", api.base_url()))
        .await
        .expect("open /ui");
    let landed = page.current_url().await.expect("url");
    assert_eq!(landed.path(), "/ui/", "GET /ui leads to the page");
    browser.watch_for_problems().await;
    browser.wait_text("#session-role", "no token needed").await;
    browser
        .wait_text("li[data-pool='team-42'] .n-sold", "2")
        .await;

    // Create a pool through the console's admin form.
    browser.fill("#create-pool", "sku-red-shoe").await;
    browser.fill("#create-total", "10").await;
    browser.fill("#create-threshold", "3").await;
    browser.click("#create-form button[type=submit]").await;
    browser
        .wait_text("#create-form .message", "Created sku-red-shoe.")
        .await;
    let created = api.pool("sku-red-shoe").await;
    assert_pool(&created, 10, 10, 0, 0);
    assert_eq!(created["low_stock_threshold"], 3);
    browser
        .wait_numbers("li[data-pool='sku-red-shoe']", [10, 0, 0, 10])
        .await;
    assert!(
        !browser
            .has_class("li[data-pool='sku-red-shoe']", "low")
            .await
    );

    // Holds through the API; the bar follows: 3 left, at the threshold, highlighted.
    reserve(&api, "order-1", "sku-red-shoe", 2, false).await;
    reserve(&api, "order-2", "sku-red-shoe", 3, true).await;
    reserve(&api, "order-3", "sku-red-shoe", 2, false).await;
    let (status, body) = api.call("POST", "/v1/holds/order-3/confirm", None).await;
    assert_eq!(status, 200, "{body}");
    browser
        .wait_numbers("li[data-pool='sku-red-shoe']", [3, 2, 5, 10])
        .await;
    browser
        .wait_class("li[data-pool='sku-red-shoe']", "low", true)
        .await;
    // Sorted by what is left (2, 3, 28, 80), not by name.
    browser.select("#pool-sort", "available").await;
    browser
        .wait_text("#pool-list li:first-child .pool-link", "team-42")
        .await;
    browser
        .wait_text("#pool-list li:nth-child(2) .pool-link", "sku-red-shoe")
        .await;
    browser
        .wait_text("#pool-list li:last-child .pool-link", "coupon-spring")
        .await;
    // Filtered by prefix, on the server.
    browser.fill("#pool-prefix", "sku-").await;
    browser.wait_count("#pool-list li.pool", 2).await;
    browser.screenshot("console-pools.png").await;
    browser.fill("#pool-prefix", "").await;
    browser.wait_count("#pool-list li.pool", 4).await;
    // Pools of one segment do not show a segment count.
    assert_eq!(browser.count("#pool-list .segments-tag").await, 4);
    assert_eq!(
        browser
            .count("#pool-list .segments-tag:not([hidden])")
            .await,
        0
    );

    // The pool's page: its numbers and its events, arriving live.
    browser
        .click("li[data-pool='sku-red-shoe'] .pool-link")
        .await;
    browser.wait_numbers("#pool-numbers", [3, 2, 5, 10]).await;
    browser.wait_text("#pool-events", "order-3").await;
    // One segment: the count says so, and there is no segments' table.
    browser.wait_text("#pool-segments-count", "1").await;
    assert_eq!(browser.count("#pool-segments:not([hidden])").await, 0);
    let (status, body) = api.call("POST", "/v1/holds/order-1/release", None).await;
    assert_eq!(status, 200, "{body}");
    browser
        .wait_present("#pool-events tr[data-type='released']")
        .await;
    browser.wait_numbers("#pool-numbers", [5, 0, 5, 10]).await;
    assert_eq!(
        browser.count(".chart polyline").await,
        3,
        "the chart draws available, held and sold"
    );
    // Restock through the console (admin action): the numbers and the feed show it.
    browser.fill("#restock-delta", "5").await;
    browser.click("#restock-form button[type=submit]").await;
    browser
        .wait_text("#restock-form .message", "Restocked by +5")
        .await;
    browser.wait_numbers("#pool-numbers", [10, 0, 5, 15]).await;
    browser
        .wait_present("#pool-events tr[data-type='restocked']")
        .await;
    assert_pool(&api.pool("sku-red-shoe").await, 15, 10, 0, 5);
    reserve(&api, "order-4", "sku-red-shoe", 4, false).await;
    browser.wait_numbers("#pool-numbers", [6, 4, 5, 15]).await;
    browser.screenshot("console-pool.png").await;

    // A hold looked up by id, with its history, which goes on live.
    browser.lookup_hold("order-3", "confirmed").await;
    // Its times show the date, the time and the browser's offset, and are the hold's exactly.
    let read = hold(&api, "order-3").await;
    let created = browser.text("#hold-created").await;
    assert!(
        created.ends_with(BROWSER_UTC_OFFSET),
        "{created:?} shows the offset"
    );
    assert_eq!(
        shown_ms(&created),
        read["created_at_ms"].as_u64(),
        "{created:?}"
    );
    let deadline = browser.text("#hold-expires").await;
    assert_eq!(
        shown_ms(&deadline),
        read["expires_at_ms"].as_u64(),
        "{deadline:?}"
    );
    browser.wait_text("#hold-zone", BROWSER_TIME_ZONE).await;
    // A confirmed hold offers refund only.
    browser.wait_present("#hold-refund").await;
    assert_eq!(
        browser
            .count("#hold-confirm, #hold-release, #hold-extend")
            .await,
        0
    );
    browser
        .wait_text("#hold-history-note", "Every event of this hold")
        .await;
    assert_eq!(
        browser.event_types("#hold-events").await,
        ["confirmed", "held"],
        "newest first"
    );
    let (status, body) = api
        .call("POST", "/v1/holds/order-3/refund", Some(json!({})))
        .await;
    assert_eq!(status, 200, "{body}");
    browser.wait_text("#hold-status", "refunded").await;
    browser
        .wait_present("#hold-events tr[data-type='refunded']")
        .await;
    browser
        .wait_text("#hold-actions", "A refunded hold is final")
        .await;
    assert_eq!(browser.count("#hold-actions button").await, 0);

    // A stuck hold handled from its page: extended, then released (a second click).
    browser.lookup_hold("order-4", "held").await;
    assert_eq!(browser.count("#hold-refund").await, 0, "held: no refund");
    browser.fill("#hold-extend-seconds", "3600").await;
    let before_ms = now_ms();
    browser.click("#hold-extend").await;
    browser
        .wait_text("#hold-action-message", "Extended: expires")
        .await;
    let after_ms = now_ms();
    let extended = hold(&api, "order-4").await;
    let expires_at_ms = extended["expires_at_ms"].as_u64().expect("expires_at_ms");
    assert!(
        (before_ms + 3_600_000..=after_ms + 3_600_000).contains(&expires_at_ms),
        "extended by an hour from the click: {extended}"
    );
    assert_eq!(extended["status"], "held");
    let shown = browser.text("#hold-expires").await;
    assert_eq!(shown_ms(&shown), Some(expires_at_ms), "{shown:?}");
    browser.screenshot("console-hold.png").await;
    browser.click("#hold-release").await;
    browser
        .wait_text("#hold-release-box", "go back to available")
        .await;
    browser.click("#hold-release-go").await;
    browser
        .wait_text("#hold-action-message", "Released order-4: now released")
        .await;
    assert_eq!(hold(&api, "order-4").await["status"], "released");
    browser
        .wait_text("#hold-actions", "A released hold is final")
        .await;

    // Confirm: the first click only asks, Cancel leaves the hold alone; the second confirms,
    // and refund is offered instead.
    reserve(&api, "order-6", "sku-red-shoe", 1, false).await;
    browser.lookup_hold("order-6", "held").await;
    browser.click("#hold-confirm").await;
    browser.click("#hold-confirm-cancel").await;
    assert_eq!(hold(&api, "order-6").await["status"], "held");
    browser.click("#hold-confirm").await;
    browser.click("#hold-confirm-go").await;
    browser
        .wait_text("#hold-action-message", "Confirmed order-6: now confirmed")
        .await;
    assert_eq!(hold(&api, "order-6").await["status"], "confirmed");
    browser.wait_present("#hold-refund").await;
    assert_eq!(browser.count("#hold-confirm, #hold-release").await, 0);
    browser.fill("#hold-lookup-id", "no-such-order").await;
    browser.click("#hold-lookup button[type=submit]").await;
    browser
        .wait_text("#hold-state", "There is no hold no-such-order")
        .await;

    // The live feed, paused and resumed.
    browser.click("nav a[data-nav='events']").await;
    browser
        .wait_present("#feed-events tr[data-type='refunded']")
        .await;
    browser.click("#feed-pause").await;
    browser.wait_text("#feed-pause", "Resume").await;
    let newest = browser
        .attribute("#feed-events tr:first-child", "data-seq")
        .await;
    reserve(&api, "order-5", "team-42", 1, false).await;
    browser
        .wait_text("#feed-state", "Paused: 1 new event since")
        .await;
    assert_eq!(
        browser
            .attribute("#feed-events tr:first-child", "data-seq")
            .await,
        newest,
        "a paused feed does not move"
    );
    browser.click("#feed-pause").await;
    browser.wait_text("#feed-pause", "Pause").await;
    browser
        .wait_text("#feed-events tr:first-child", "order-5")
        .await;
    browser.screenshot("console-events.png").await;

    // Delete a pool (a second click confirms).
    browser
        .click("#feed-events tr[data-type='restocked'] a.pool-link")
        .await;
    browser.click("#delete-pool").await;
    browser.click("#delete-pool-confirm").await;
    browser
        .wait_text("#delete-box .message", "Deleted sku-red-shoe.")
        .await;
    let (status, _) = api.call("GET", "/v1/pools/sku-red-shoe", None).await;
    assert_eq!(status, 404, "the console deleted the pool");
    browser.wait_text("#pool-state", "There is no pool").await;

    // A refund the server refuses (the hold's pool is gone) shows the API's message and code,
    // and changes nothing.
    browser.lookup_hold("order-6", "confirmed").await;
    browser.click("#hold-refund").await;
    browser.click("#hold-refund-go").await;
    browser
        .wait_text(
            "#hold-action-message",
            "Refund refused: pool sku-red-shoe of this hold was deleted (409 pool_deleted)",
        )
        .await;
    assert_eq!(hold(&api, "order-6").await["status"], "confirmed");

    // The admin form creates a segmented pool: the count is sent, and the list shows it.
    browser.click("nav a[data-nav='pools']").await;
    browser.fill("#create-pool", "seg-demo").await;
    browser.fill("#create-total", "6").await;
    browser.fill("#create-segments", "2").await;
    browser.click("#create-form button[type=submit]").await;
    browser
        .wait_text("#create-form .message", "Created seg-demo.")
        .await;
    assert_eq!(api.pool("seg-demo").await["segments"], 2);
    browser
        .wait_text("li[data-pool='seg-demo'] .segments-tag", "2 segments")
        .await;

    // A segmented pool: its count in the list and on its page, and its segments' table, which
    // on the embedded engine (the pool kept whole) is segment 0 with the pool's numbers.
    seed(
        &api,
        "sku-green-shoe",
        json!({"total": 40, "segments": 4}),
        &[("g", 5, true), ("g", 3, false)],
    )
    .await;
    let (status, listed) = api
        .call("GET", "/v1/pools/sku-green-shoe/segments", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    let partition = api.pool("sku-green-shoe").await["partition"].clone();
    assert_eq!(
        listed,
        json!({"segments": [{"segment": 0, "partition": partition, "total": 40,
                             "available": 32, "held": 3, "sold": 5}]})
    );
    browser.click("nav a[data-nav='pools']").await;
    browser
        .wait_text("li[data-pool='sku-green-shoe'] .segments-tag", "4 segments")
        .await;
    browser
        .click("li[data-pool='sku-green-shoe'] .pool-link")
        .await;
    browser.wait_numbers("#pool-numbers", [32, 3, 5, 40]).await;
    browser.wait_text("#pool-segments-count", "4").await;
    browser
        .wait_numbers("#pool-segments-rows tr[data-segment='0']", [32, 3, 5, 40])
        .await;
    assert_eq!(browser.count("#pool-segments-rows tr").await, 1);
    assert_eq!(
        browser
            .text("#pool-segments-rows tr[data-segment='0'] td:nth-child(2)")
            .await,
        partition.to_string(),
        "the segment's partition"
    );
    browser
        .wait_text("#pool-segments-state", "Created with 4 segments")
        .await;
    // The table follows the pool.
    let (status, body) = api.call("POST", "/v1/holds/g-1/release", None).await;
    assert_eq!(status, 200, "{body}");
    browser
        .wait_numbers("#pool-segments-rows tr[data-segment='0']", [35, 0, 5, 40])
        .await;

    // A burst of 400 events, past the feed's window of 50 before the console can read them: it
    // shows a gap where they were, never a silent one, and goes on from the oldest kept.
    seed(&api, "flash-sale", json!({"total": 1000}), &[]).await;
    let ops: Vec<Value> = (0..400)
        .map(|index| {
            json!({"op": "reserve", "hold_id": format!("flash-{index}"),
                   "items": [{"pool": "flash-sale", "qty": 1}]})
        })
        .collect();
    let (status, body) = api
        .call("POST", "/v1/batch", Some(json!({ "ops": ops })))
        .await;
    assert_eq!(status, 200, "{body}");
    browser.click("nav a[data-nav='events']").await;
    browser.wait_present("#feed-events tr.gap").await;
    browser
        .wait_text("#feed-events tr:first-child", "flash-399")
        .await;
    browser.assert_no_problems().await;
}

/// A server with tokens: the console asks for one, keeps it in the tab's sessionStorage only,
/// and shows the pool writes to admin tokens only.
async fn with_tokens(browser: &Browser) {
    let server = Server::start_with(ServerConfig::default().with_auth()).await;
    let api = server.api();
    seed(&api, "team-7", json!({"total": 5}), &[("m", 2, true)]).await;

    let page = &browser.client;
    page.goto(&format!("{}/ui/", api.base_url()))
        .await
        .expect("open /ui/");
    browser.wait_present("#token-dialog[open]").await;
    browser.watch_for_problems().await;
    browser.screenshot("console-token.png").await;
    browser.fill("#token-input", "not-a-token-at-all").await;
    browser.click("#token-form button[type=submit]").await;
    browser
        .wait_text("#token-error", "This token is not accepted")
        .await;

    // A client token reads, and is refused pool writes (then no longer offered them).
    browser.fill("#token-input", CLIENT_TOKEN).await;
    browser.click("#token-form button[type=submit]").await;
    browser.wait_absent("#token-dialog[open]").await;
    browser
        .wait_numbers("li[data-pool='team-7']", [3, 0, 2, 5])
        .await;
    assert_eq!(
        browser
            .script("return sessionStorage.getItem('stockd.token')")
            .await,
        json!(CLIENT_TOKEN)
    );
    assert_eq!(
        browser
            .script("return localStorage.length + document.cookie.length")
            .await,
        json!(0),
        "the token is kept nowhere but the tab's sessionStorage"
    );
    browser.fill("#create-pool", "made-by-client").await;
    browser.fill("#create-total", "5").await;
    browser.click("#create-form button[type=submit]").await;
    browser.wait_absent("#create-form").await;
    browser
        .wait_text(".admin .hint", "needs an admin token")
        .await;
    browser.wait_text("#session-role", "client token").await;
    let (status, _) = api.call("GET", "/v1/pools/made-by-client", None).await;
    assert_eq!(status, 404, "a client token wrote no pool");
    browser.click("li[data-pool='team-7'] .pool-link").await;
    browser.wait_numbers("#pool-numbers", [3, 0, 2, 5]).await;
    assert_eq!(browser.count("#restock-form, #delete-box").await, 0);
    // Hold commands are a client's rights (docs/security.md): offered to it, and done.
    reserve(&api, "cart-1", "team-7", 1, false).await;
    browser.lookup_hold("cart-1", "held").await;
    browser.click("#hold-release").await;
    browser.click("#hold-release-go").await;
    browser
        .wait_text("#hold-action-message", "Released cart-1: now released")
        .await;
    assert_eq!(hold(&api, "cart-1").await["status"], "released");
    browser.click("#hold-facts a.pool-link").await;
    browser.wait_numbers("#pool-numbers", [3, 0, 2, 5]).await;

    // Forget it (the page starts again); an admin token may write pools.
    browser.assert_no_problems().await;
    browser.click("#session-forget").await;
    browser.wait_present("#token-dialog[open]").await;
    browser.watch_for_problems().await;
    browser.fill("#token-input", ADMIN_TOKEN).await;
    browser.click("#token-form button[type=submit]").await;
    browser.wait_absent("#token-dialog[open]").await;
    browser.wait_present("#restock-form").await;
    browser.fill("#restock-delta", "-1").await;
    browser.click("#restock-form button[type=submit]").await;
    browser.wait_numbers("#pool-numbers", [2, 0, 2, 4]).await;
    browser.wait_text("#session-role", "admin token").await;
    assert_pool(&api.pool("team-7").await, 4, 2, 0, 2);
    browser.assert_no_problems().await;
}

/// Creates `pool` and its holds (id, qty, confirm) through the API.
async fn seed(api: &Api, pool: &str, body: Value, holds: &[(&str, u64, bool)]) {
    let (status, answer) = api
        .call("PUT", &format!("/v1/pools/{pool}"), Some(body))
        .await;
    assert_eq!(status, 201, "{answer}");
    for (index, (prefix, qty, confirm)) in holds.iter().enumerate() {
        reserve(api, &format!("{prefix}-{index}"), pool, *qty, *confirm).await;
    }
}

/// The hold as the API reads it.
async fn hold(api: &Api, hold_id: &str) -> Value {
    let (status, body) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The instant a time of the console means (`2026-05-14 14:03:07.250 +05:30`, possibly followed
/// by more text), in ms since the epoch; None when the text is not such a time.
fn shown_ms(text: &str) -> Option<u64> {
    const SHAPE: &[u8] = b"0000-00-00 00:00:00.000 +00:00";
    let fits = text.len() >= SHAPE.len()
        && SHAPE
            .iter()
            .zip(text.bytes())
            .all(|(&shape, byte)| match shape {
                b'0' => byte.is_ascii_digit(),
                b'+' => byte == b'+' || byte == b'-',
                _ => byte == shape,
            });
    if !fits {
        return None;
    }
    let field = |range: std::ops::Range<usize>| text[range].parse::<i64>().ok();
    let (year, month, day) = (field(0..4)?, field(5..7)?, field(8..10)?);
    let clock_ms =
        ((field(11..13)? * 60 + field(14..16)?) * 60 + field(17..19)?) * 1000 + field(20..23)?;
    let offset_ms = (field(25..27)? * 60 + field(28..30)?) * 60_000;
    let utc_ms = match &text[24..25] {
        "+" => days_from_civil(year, month, day) * 86_400_000 + clock_ms - offset_ms,
        _ => days_from_civil(year, month, day) * 86_400_000 + clock_ms + offset_ms,
    };
    u64::try_from(utc_ms).ok()
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[test]
fn shown_times_parse() {
    assert_eq!(shown_ms("1970-01-01 00:00:00.000 +00:00"), Some(0));
    assert_eq!(shown_ms("1969-12-31 14:30:00.000 -09:30"), Some(0));
    assert_eq!(
        shown_ms("1970-01-01 05:30:00.250 +05:30 (in 9 m)"),
        Some(250)
    );
    assert_eq!(
        shown_ms("2000-03-01 00:00:00.000 -01:00"),
        Some(951_872_400_000)
    );
    assert_eq!(shown_ms("14:03:07.250"), None);
    assert_eq!(shown_ms("2000-03-01 00:00:00.000"), None);
}

async fn reserve(api: &Api, hold_id: &str, pool: &str, qty: u64, confirm: bool) {
    let body = json!({"hold_id": hold_id, "user": format!("u-{hold_id}"),
                      "items": [{"pool": pool, "qty": qty}], "confirm": confirm});
    let (status, answer) = api.call("POST", "/v1/holds", Some(body)).await;
    assert_eq!(status, 201, "{answer}");
}

/// Chromium and chromedriver, from the PATH (Debian puts both in /usr/bin).
fn browser_programs() -> Option<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    };
    Some((find("chromium")?, find("chromedriver")?))
}

/// chromedriver on a free loopback port and one Chromium session, both ended on drop.
struct Browser {
    driver: Child,
    client: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start((chromium, chromedriver): &(PathBuf, PathBuf)) -> Browser {
        let profile = tempfile::Builder::new()
            .prefix("stockd-console-chromium-")
            .tempdir()
            .expect("tempdir");
        let mut attempts = 0;
        let (driver, port) = loop {
            let port = free_port();
            let mut driver = Command::new(chromedriver)
                .arg(format!("--port={port}"))
                // Inherited by the Chromium it starts.
                .env("TZ", BROWSER_TIME_ZONE)
                // Its own process group, with the Chromium it starts: ended together on drop.
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start chromedriver");
            if driver_ready(port, &mut driver).await {
                break (driver, port);
            }
            let _ = driver.kill();
            let _ = driver.wait();
            attempts += 1;
            assert!(attempts < 5, "chromedriver did not start");
        };
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|flag| flag.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("start a Chromium session");
        Browser {
            driver,
            client,
            _profile: profile,
        }
    }

    /// From now until the page is left: records the page's uncaught errors, rejected promises
    /// and Content-Security-Policy violations, for [`Browser::assert_no_problems`].
    async fn watch_for_problems(&self) {
        self.script(
            "window.consoleProblems = [];
             addEventListener('error', (e) => consoleProblems.push('error: ' + e.message));
             addEventListener('unhandledrejection', (e) => consoleProblems.push('rejection: ' + e.reason));
             document.addEventListener('securitypolicyviolation', (e) =>
               consoleProblems.push('CSP: ' + e.violatedDirective + ' ' + e.blockedURI));",
        )
        .await;
    }

    async fn assert_no_problems(&self) {
        assert_eq!(
            self.script("return window.consoleProblems").await,
            json!([]),
            "the page reported problems"
        );
    }

    async fn find(&self, css: &str) -> Result<Element, CmdError> {
        self.client.find(Locator::Css(css)).await
    }

    /// Waits until `check` is true, then returns; panics with `what` and the page after WAIT.
    async fn wait_until<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<String>>,
    {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = check().await;
            if seen.is_none() {
                return;
            }
            if Instant::now() > deadline {
                let text = match self.find("body").await {
                    Ok(body) => body.text().await.unwrap_or_default(),
                    Err(error) => format!("<no body: {error}>"),
                };
                panic!("waited {WAIT:?} for {what}; last seen {seen:?}\n---- page ----\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the element `css` shows a text containing `expected`.
    async fn wait_text(&self, css: &str, expected: &str) {
        self.wait_until(&format!("{css} to show {expected:?}"), || async {
            match self.find(css).await {
                Ok(element) => match element.text().await {
                    Ok(text) if text.contains(expected) => None,
                    Ok(text) => Some(text),
                    Err(error) => Some(error.to_string()),
                },
                Err(error) => Some(error.to_string()),
            }
        })
        .await
    }

    /// Waits until the `.n-available`, `.n-held`, `.n-sold` and `.n-total` inside `css` are
    /// `numbers`.
    async fn wait_numbers(&self, css: &str, numbers: [u64; 4]) {
        let expected: Vec<String> = numbers.iter().map(u64::to_string).collect();
        self.wait_until(&format!("{css} to show {numbers:?}"), || async {
            let mut seen = Vec::new();
            for name in ["available", "held", "sold", "total"] {
                match self.find(&format!("{css} .n-{name}")).await {
                    Ok(element) => seen.push(element.text().await.unwrap_or_default()),
                    Err(error) => return Some(error.to_string()),
                }
            }
            (seen != expected).then(|| format!("{seen:?}"))
        })
        .await
    }

    async fn wait_present(&self, css: &str) {
        self.wait_until(&format!("{css} to be there"), || async {
            self.find(css).await.err().map(|error| error.to_string())
        })
        .await
    }

    async fn wait_absent(&self, css: &str) {
        self.wait_until(&format!("{css} to be gone"), || async {
            self.find(css).await.ok().map(|_| "still there".to_string())
        })
        .await
    }

    async fn wait_count(&self, css: &str, count: usize) {
        self.wait_until(&format!("{count} of {css}"), || async {
            let found = self.count(css).await;
            (found != count).then(|| format!("{found}"))
        })
        .await
    }

    async fn wait_class(&self, css: &str, class: &str, present: bool) {
        self.wait_until(
            &format!("{css} to have class {class}: {present}"),
            || async {
                (self.has_class(css, class).await != present).then(|| "not yet".to_string())
            },
        )
        .await
    }

    async fn has_class(&self, css: &str, class: &str) -> bool {
        let classes = self.attribute(css, "class").await.unwrap_or_default();
        classes.split_whitespace().any(|name| name == class)
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |found| found.len())
    }

    /// The text the element `css` shows now.
    async fn text(&self, css: &str) -> String {
        self.wait_present(css).await;
        let element = self.find(css).await.expect(css);
        element.text().await.expect("read a text")
    }

    /// Looks `hold_id` up with the box at the top, and waits until its page shows `status`.
    async fn lookup_hold(&self, hold_id: &str, status: &str) {
        self.fill("#hold-lookup-id", hold_id).await;
        self.click("#hold-lookup button[type=submit]").await;
        self.wait_text(".hold-id", hold_id).await;
        self.wait_until(&format!("hold {hold_id} to show {status}"), || async {
            let shown = match self.find("#hold-status").await {
                Ok(element) => element.text().await.map_err(|error| error.to_string()),
                Err(error) => Err(error.to_string()),
            };
            (shown.as_deref() != Ok(status)).then(|| format!("{shown:?}"))
        })
        .await
    }

    async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let element = self.find(css).await.expect(css);
        element.attr(name).await.expect("read an attribute")
    }

    /// The `data-type` of each event row in `css`, in the page's order.
    async fn event_types(&self, css: &str) -> Vec<String> {
        let rows = self
            .client
            .find_all(Locator::Css(&format!("{css} tr[data-type]")))
            .await
            .expect("event rows");
        let mut types = Vec::new();
        for row in rows {
            types.push(row.attr("data-type").await.unwrap().unwrap_or_default());
        }
        types
    }

    async fn click(&self, css: &str) {
        self.wait_present(css).await;
        self.find(css)
            .await
            .expect(css)
            .click()
            .await
            .unwrap_or_else(|error| panic!("click {css}: {error}"));
    }

    /// Replaces the value of the input `css` with `text`, as typing would.
    async fn fill(&self, css: &str, text: &str) {
        self.wait_present(css).await;
        let input = self.find(css).await.expect(css);
        input.clear().await.expect("clear");
        if !text.is_empty() {
            input.send_keys(text).await.expect("type");
        }
    }

    async fn select(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .expect(css)
            .select_by_value(value)
            .await
            .unwrap_or_else(|error| panic!("select {value} in {css}: {error}"));
    }

    async fn script(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .expect("run a script")
    }

    /// Saves the viewport as `name` in `$STOCKD_CONSOLE_SCREENSHOTS` (relative to the workspace
    /// root), when set.
    async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("STOCKD_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let dir = workspace.join(dir);
        std::fs::create_dir_all(&dir).expect("create the screenshot directory");
        let png = self.client.screenshot().await.expect("take a screenshot");
        std::fs::write(dir.join(name), png).expect("save the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver's process group: chromedriver and the Chromium it started (a test that
        // panicked never closed its session).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}

/// Whether chromedriver answers `GET /status` with ready, before it exits or DRIVER_READY ends.
async fn driver_ready(port: u16, driver: &mut Child) -> bool {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + DRIVER_READY;
    while Instant::now() < deadline {
        if driver.try_wait().ok().flatten().is_some() {
            return false;
        }
        let status = client
            .get(format!("http://127.0.0.1:{port}/status"))
            .send()
            .await;
        if let Ok(response) = status {
            if let Ok(body) = response.json::<Value>().await {
                if body["value"]["ready"] == json!(true) {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
