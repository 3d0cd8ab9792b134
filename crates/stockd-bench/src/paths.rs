//! The API's paths as the bench writes them into its requests, made from `stockd_api`'s
//! operations: no path of the API is typed out in this crate's code (only its tests spell some
//! out, as expected values), so a path the server stops serving fails the bench's build, not its
//! run. Set-up and read-back go through `stockd-client`, whose calls are built the same way.
//!
//! Values go into a path as they are, not percent-encoded: the bench's pool and hold ids are
//! made of letters, digits, `-`, `_`, `.` and `:`, which a path segment takes unchanged.

use bytes::Bytes;
use http::Method;
use stockd_api::Operation;

use crate::http::Request;

/// `operation`'s path with each `{name}` replaced by the next of `values`, in order.
///
/// # Panics
/// When `values` are not as many as the path's `{name}`s: a mistake in the bench's code.
pub fn path(operation: Operation, values: &[&str]) -> String {
    if values.is_empty() && !operation.path.contains('{') {
        return operation.path.to_owned();
    }
    let segments = operation
        .segments(values)
        .unwrap_or_else(|| panic!("{} takes other values than {values:?}", operation.path));
    let mut path = String::with_capacity(operation.path.len() + 16);
    for segment in segments {
        path.push('/');
        path.push_str(segment);
    }
    path
}

/// `operation`'s HTTP method.
pub fn method(operation: Operation) -> Method {
    Method::from_bytes(operation.method.as_bytes()).expect("the API's methods are HTTP methods")
}

/// A request of `operation` on the path its `values` make, with `body` (empty for none).
pub fn request(operation: Operation, values: &[&str], body: Bytes) -> Request {
    Request {
        method: method(operation),
        path: path(operation, values),
        body,
    }
}

#[cfg(test)]
mod tests {
    use stockd_api as api;

    use super::*;

    #[test]
    fn paths_are_the_operations_templates_filled_in() {
        assert_eq!(path(api::RESERVE, &[]), "/v1/holds");
        assert_eq!(
            path(api::CONFIRM, &["bench-1-7"]),
            "/v1/holds/bench-1-7/confirm"
        );
        assert_eq!(
            path(api::PUT_POOL, &["bench-1-hot"]),
            "/v1/pools/bench-1-hot"
        );
        let release = request(api::RELEASE, &["h"], Bytes::new());
        assert_eq!(
            (release.method, release.path.as_str()),
            (Method::POST, "/v1/holds/h/release")
        );
    }

    #[test]
    #[should_panic(expected = "takes other values")]
    fn a_missing_value_is_a_bug() {
        path(api::GET_HOLD, &[]);
    }
}
