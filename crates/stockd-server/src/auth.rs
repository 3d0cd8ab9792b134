//! Bearer-token authentication and the role check.
//!
//! Owns who may call what: with no tokens configured everything is open; otherwise every route
//! except the operational ones (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`) and the web
//! console's files (`/ui`, which hold no data) needs `Authorization: Bearer <secret>`, and only
//! an admin token may write or delete pools. Unknown paths are not checked, so they answer 404
//! with or without a token. This module must never log or echo a secret, and compares secrets
//! in constant time so response timing does not reveal how much of a guess was right.

use std::fmt;
use std::str::FromStr;

use axum::http::{header, HeaderMap, Method};

use crate::error::ApiError;
use crate::routes::RouteId;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Everything.
    Admin,
    /// Holds, locks, reads and events; not pool writes or deletes.
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Client => "client",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "admin" => Ok(Role::Admin),
            "client" => Ok(Role::Client),
            other => Err(format!("unknown role {other:?}; expected admin or client")),
        }
    }
}

/// What a request was routed to, as far as access is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// No route matched: the answer is 404 whoever asks, so no token is needed to learn it.
    Unrouted,
    /// A route of the table.
    Route(RouteId),
    /// A route the router has but the route table does not list: a programming error, and it
    /// fails closed (admin only) rather than open, so a route added without its access rule is
    /// never public.
    Unlisted,
}

/// The configured secrets.
pub(crate) struct Auth {
    tokens: Vec<(Box<[u8]>, Role)>,
}

impl Auth {
    pub(crate) fn new(tokens: &[(String, Role)]) -> Self {
        Auth {
            tokens: tokens
                .iter()
                .map(|(secret, role)| (secret.as_bytes().into(), *role))
                .collect(),
        }
    }

    /// Whether tokens are configured; without any, every request is served unchecked.
    pub(crate) fn checks_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Whether the request may reach its handler.
    pub(crate) fn check(
        &self,
        target: Target,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<(), ApiError> {
        if self.tokens.is_empty() {
            return Ok(());
        }
        let admin_only = match target {
            Target::Unrouted => return Ok(()),
            Target::Route(route) if route.is_open() => return Ok(()),
            Target::Route(route) => route.is_admin_only(method),
            Target::Unlisted => true,
        };
        let role = bearer(headers)
            .and_then(|given| self.role_of(given))
            .ok_or(ApiError::Unauthorized)?;
        if role == Role::Client && admin_only {
            return Err(ApiError::Forbidden);
        }
        Ok(())
    }

    /// The role of `given`, comparing against every token so that timing does not depend on
    /// which one matched, nor on how long a matching prefix is.
    fn role_of(&self, given: &[u8]) -> Option<Role> {
        if given.is_empty() {
            return None;
        }
        let mut found = None;
        for (secret, role) in &self.tokens {
            if constant_time_eq(secret, given) {
                found = Some(*role);
            }
        }
        found
    }
}

/// The secret of an `Authorization: Bearer <secret>` header (scheme case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(rest.trim_ascii())
}

/// Equality whose time depends only on the lengths, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(&headers("Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers("bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers("BEARER  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn secrets_compare_exactly() {
        let auth = Auth::new(&[
            ("admin-secret".into(), Role::Admin),
            ("c".into(), Role::Client),
        ]);
        assert_eq!(auth.role_of(b"admin-secret"), Some(Role::Admin));
        assert_eq!(auth.role_of(b"c"), Some(Role::Client));
        assert_eq!(auth.role_of(b"admin-secreT"), None);
        assert_eq!(auth.role_of(b"admin-secret2"), None);
        assert_eq!(auth.role_of(b""), None);
    }

    #[test]
    fn a_route_missing_from_the_table_is_admin_only() {
        let auth = Auth::new(&[
            ("admin-secret".into(), Role::Admin),
            ("client-secret".into(), Role::Client),
        ]);
        let check = |token: Option<&str>| {
            let headers = token.map_or_else(HeaderMap::new, |t| headers(&format!("Bearer {t}")));
            auth.check(Target::Unlisted, &Method::GET, &headers)
                .map_err(|error| error.code())
        };
        assert_eq!(check(None), Err("unauthorized"));
        assert_eq!(check(Some("client-secret")), Err("forbidden"));
        assert_eq!(check(Some("admin-secret")), Ok(()));
        // Unrouted paths answer 404 to anyone; open routes need nothing.
        assert_eq!(
            auth.check(Target::Unrouted, &Method::GET, &HeaderMap::new())
                .map_err(|error| error.code()),
            Ok(())
        );
        assert_eq!(
            auth.check(
                Target::Route(RouteId::Healthz),
                &Method::GET,
                &HeaderMap::new()
            )
            .map_err(|error| error.code()),
            Ok(())
        );
    }

    #[test]
    fn roles_parse() {
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert_eq!("client".parse::<Role>(), Ok(Role::Client));
        assert!("root".parse::<Role>().is_err());
    }
}
