//! `GET /ui`, `/ui/` and `/ui/assets/{file}`: the web console, static files compiled into the
//! binary.
//!
//! Owns the console's files (`crates/stockd-server/console/`, embedded with `include_str!`, so
//! nothing is built at install time and nothing is fetched at run time) and the headers they are
//! served with: their content type, a Content-Security-Policy that lets the page load and call
//! only its own origin and run no inline script, and revalidation by ETag. The files hold no
//! data, so they need no token; everything the console shows it reads through the public API
//! with the operator's token, like any other client. This module must never serve anything
//! but these files, and never read the backend.
//!
//! One file is generated: `operations.js`, the API's operations (method and path) from
//! [`stockd_api::OPERATIONS`], through which the console names every request. It is checked in
//! (the console stays plain files) and a test here fails when it differs from the table.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::json::NoQuery;

/// What the console's page may load and run: its own files, and requests to its own origin (the
/// API). No inline script or style attribute, no plugins, no framing, no form posts elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Revalidate on every load (cheap: a 304 when the file has not changed), so that a browser
/// never runs an old console against an upgraded server.
const CACHE_CONTROL: &str = "no-cache";

/// One embedded file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
    /// Of the bytes, computed at compile time.
    etag: u64,
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../../console/", $name)),
            etag: fnv1a(include_bytes!(concat!("../../console/", $name))),
        }
    };
}

/// The page itself, served at `/ui/`.
const INDEX: Asset = asset!("index.html", HTML);

/// Everything the page loads, served at `/ui/assets/{name}`.
const ASSETS: &[Asset] = &[
    asset!("style.css", CSS),
    asset!("icon.svg", SVG),
    asset!("main.js", JAVASCRIPT),
    asset!("api.js", JAVASCRIPT),
    asset!("operations.js", JAVASCRIPT),
    asset!("session.js", JAVASCRIPT),
    asset!("dom.js", JAVASCRIPT),
    asset!("feed.js", JAVASCRIPT),
    asset!("series.js", JAVASCRIPT),
    asset!("chart.js", JAVASCRIPT),
    asset!("view-pools.js", JAVASCRIPT),
    asset!("view-pool.js", JAVASCRIPT),
    asset!("view-hold.js", JAVASCRIPT),
    asset!("view-events.js", JAVASCRIPT),
];

/// FNV-1a, 64 bits: enough to tell two versions of a file apart in an ETag.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut index = 0;
    while index < bytes.len() {
        hash ^= bytes[index] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        index += 1;
    }
    hash
}

/// `GET /ui`: the page lives at `/ui/`, so that its relative links (`assets/...`, and the API
/// at `../v1/...`) resolve under it, also behind a proxy that mounts stockd under a prefix (the
/// relative `Location` keeps that prefix).
pub(crate) async fn redirect(_: NoQuery) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("ui/"));
    response
}

/// `GET /ui/`: the console's page.
pub(crate) async fn index(headers: HeaderMap, _: NoQuery) -> Response {
    serve(&INDEX, &headers)
}

/// `GET /ui/assets/{file}`: one of the page's files; any other name is 404 `not_found`. The
/// name is compared as it came, undecoded (no file name needs percent-encoding), so that no
/// decoding can fail with anything but this 404.
pub(crate) async fn asset(uri: Uri, headers: HeaderMap, _: NoQuery) -> Response {
    let name = uri.path().rsplit('/').next().unwrap_or_default();
    match ASSETS.iter().find(|asset| asset.name == name) {
        Some(asset) => serve(asset, &headers),
        None => {
            let names: Vec<&str> = ASSETS.iter().map(|asset| asset.name).collect();
            let shown: String = name.chars().take(200).collect();
            ApiError::NotFound {
                tried: format!("GET /ui/assets/{shown}"),
                advice: format!("the console's files are {}", names.join(", ")),
            }
            .into_response()
        }
    }
}

fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.etag);
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        });
    let mut response = if unchanged {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = Response::new(Body::from(asset.bytes));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        response
    };
    let headers = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(asset: &Asset) -> &'static str {
        std::str::from_utf8(asset.bytes).unwrap()
    }

    /// The names a file loads: `assets/NAME"` in the page, `"./NAME"` in a module.
    fn loaded_by(asset: &Asset) -> Vec<&'static str> {
        text(asset)
            .split('"')
            .skip(1)
            .step_by(2)
            .filter_map(|quoted| {
                quoted
                    .strip_prefix("assets/")
                    .or_else(|| quoted.strip_prefix("./"))
            })
            .collect()
    }

    /// Every file the page or a module loads is served, and every served file is loaded: a file
    /// renamed on one side only would be a broken console.
    #[test]
    fn the_page_and_the_asset_table_agree() {
        let mut loaded = Vec::new();
        for source in std::iter::once(&INDEX).chain(ASSETS) {
            for name in loaded_by(source) {
                assert!(
                    ASSETS.iter().any(|asset| asset.name == name),
                    "{} loads {name}, which is not served",
                    source.name
                );
                loaded.push(name);
            }
        }
        for asset in ASSETS {
            assert!(
                loaded.contains(&asset.name),
                "{} is served but nothing loads it",
                asset.name
            );
        }
    }

    /// The Content-Security-Policy forbids inline script and style; the page must not need them.
    #[test]
    fn no_inline_script_or_style() {
        let page = text(&INDEX);
        assert!(!page.contains("<script>"), "inline script in index.html");
        assert!(!page.contains("<style"), "inline style in index.html");
        assert!(!page.contains(" style="), "a style attribute in index.html");
        let handler = page.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert_eq!(handler, None, "an inline event handler in index.html");
        for asset in ASSETS {
            for forbidden in [
                "innerHTML",
                "outerHTML",
                "eval(",
                "new Function",
                "\"style\"",
            ] {
                assert!(
                    !text(asset).contains(forbidden),
                    "{} uses {forbidden}: build elements with dom.js",
                    asset.name
                );
            }
        }
    }

    /// `operations.js` as [`stockd_api::OPERATIONS`] generates it: one frozen `{ method, path }`
    /// per operation, under its constant's name, the path relative to the API's root (the page
    /// resolves it against `<base>/`, as it does every API path).
    fn generated_operations() -> String {
        let mut text = String::from(
            "// Generated from stockd-api's operation table (crates/stockd-api/src/lib.rs) by the\n\
             // test `console_operations_are_the_api_table` (crates/stockd-server/src/routes/\n\
             // console.rs): do not edit; rerun that test with STOCKD_WRITE_CONSOLE_OPERATIONS=1\n\
             // to rewrite this file. Paths are relative to the API's root; api.js `pathOf` fills\n\
             // their `{name}` segments.\n\n",
        );
        for operation in stockd_api::OPERATIONS {
            let path = operation.path.strip_prefix('/').unwrap_or(operation.path);
            text.push_str(&format!(
                "export const {} = Object.freeze({{ method: \"{}\", path: \"{path}\" }});\n",
                operation.name, operation.method
            ));
        }
        text
    }

    /// The served `operations.js` is the API's operation table: an operation added, renamed or
    /// moved in `stockd-api` fails here until the file is regenerated.
    #[test]
    fn console_operations_are_the_api_table() {
        let expected = generated_operations();
        if std::env::var("STOCKD_WRITE_CONSOLE_OPERATIONS").as_deref() == Ok("1") {
            let file = concat!(env!("CARGO_MANIFEST_DIR"), "/console/operations.js");
            std::fs::write(file, &expected).unwrap();
            return;
        }
        let served = ASSETS
            .iter()
            .find(|asset| asset.name == "operations.js")
            .expect("operations.js is served");
        assert!(
            text(served) == expected,
            "console/operations.js differs from stockd_api::OPERATIONS; regenerate it with \
             `STOCKD_WRITE_CONSOLE_OPERATIONS=1 cargo test -p stockd-server --lib \
             console_operations_are_the_api_table`. Expected:\n{expected}"
        );
    }

    #[test]
    fn etags_tell_versions_apart() {
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
        let mut tags: Vec<u64> = ASSETS.iter().map(|asset| asset.etag).collect();
        tags.push(INDEX.etag);
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len() + 1);
    }
}
