//! Validated identifiers. Parse, don't validate: an id that exists as one of these types is
//! already known to be 1..=128 bytes of `[A-Za-z0-9._:-]` starting with an alphanumeric byte.
//! Ids are reference-counted so that cloning one into a record, an event or an index is cheap.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::limits::ID_LEN_MAX;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {ID_LEN_MAX} bytes")]
    TooLong,
    #[error("must start with an ASCII letter or digit")]
    BadFirstByte,
    #[error("may only contain ASCII letters, digits, '.', '_', ':' and '-'")]
    BadByte,
}

/// Checks the identifier grammar shared by pools, holds, users and locks.
pub fn check_id(text: &str) -> Result<(), IdError> {
    let bytes = text.as_bytes();
    let first = *bytes.first().ok_or(IdError::Empty)?;
    if bytes.len() > ID_LEN_MAX {
        return Err(IdError::TooLong);
    }
    if !first.is_ascii_alphanumeric() {
        return Err(IdError::BadFirstByte);
    }
    if !bytes.iter().all(|&b| is_id_byte(b)) {
        return Err(IdError::BadByte);
    }
    Ok(())
}

/// Whether `b` may appear in an identifier (also used to check list prefixes).
pub fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn parse(text: &str) -> Result<Self, IdError> {
                check_id(text)?;
                Ok(Self(Arc::from(text)))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(text: &str) -> Result<Self, IdError> {
                Self::parse(text)
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_str(IdVisitor(PhantomData))
            }
        }
    };
}

/// What [`IdVisitor`] needs from an identifier type: how to make one of a text read.
trait IdText: Sized {
    fn parse_text(text: &str) -> Result<Self, IdError>;
}

macro_rules! read_as_parsed {
    ($($name:ident),*) => {$(
        impl IdText for $name {
            fn parse_text(text: &str) -> Result<Self, IdError> {
                Self::parse(text)
            }
        }
    )*};
}

read_as_parsed!(HoldId, LockName, OwnerId, RequestId);

thread_local! {
    /// The pool and user ids read so far on this thread, while [`interning`] runs.
    static INTERNED: RefCell<Option<Interned>> = const { RefCell::new(None) };
}

/// Hashed with hashbrown's foldhash rather than std's SipHash: a snapshot of ten million holds
/// looks a user up for each.
#[derive(Default)]
struct Interned {
    pools: hashbrown::HashSet<PoolId>,
    users: hashbrown::HashSet<UserId>,
}

/// Runs `read` with the pool and user ids that serde reads on this thread interned: every
/// one of the same text shares one allocation. For reading a snapshot, where a million holds
/// name a few pools and users, each otherwise read into an allocation of its own.
pub fn interning<R>(read: impl FnOnce() -> R) -> R {
    /// Puts back what was there, a panic included.
    struct Restore(Option<Interned>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            INTERNED.with(|interned| *interned.borrow_mut() = outer);
        }
    }
    let _restore = Restore(INTERNED.with(|interned| interned.replace(Some(Interned::default()))));
    read()
}

macro_rules! read_interned {
    ($($name:ident in $set:ident),*) => {$(
        impl IdText for $name {
            fn parse_text(text: &str) -> Result<Self, IdError> {
                INTERNED.with(|interned| match interned.borrow_mut().as_mut() {
                    None => Self::parse(text),
                    Some(interned) => match interned.$set.get(text) {
                        Some(known) => Ok(known.clone()),
                        None => {
                            let id = Self::parse(text)?;
                            interned.$set.insert(id.clone());
                            Ok(id)
                        }
                    },
                })
            }
        }
    )*};
}

read_interned!(PoolId in pools, UserId in users);

/// Reads an identifier straight from the text the deserializer lends (borrowed from the body
/// or in its scratch buffer), so the id's one allocation is its `Arc`. Serde's `Cow<str>`
/// would always copy the text into a `String` first.
struct IdVisitor<T>(PhantomData<T>);

impl<T: IdText> Visitor<'_> for IdVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Serde's own words for a string, as the messages were before this visitor.
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        // The field's name is the caller's to add: it knows the path.
        T::parse_text(text).map_err(|e| E::custom(format_args!("{:?}: {}", text, e)))
    }
}

identifier!(
    /// A pool of countable stock (a SKU, a coupon batch, a team's slots).
    PoolId
);
impl PoolId {
    /// The name a backend that spreads a pool over partitions gives the pool's segment
    /// `segment`: `POOL~J`. `~` is never in a pool id, so no client can name it, and no pool
    /// of the API is ever it: it exists only between such a backend and its store.
    pub fn segment(&self, segment: u32) -> PoolId {
        PoolId(Arc::from(format!("{}~{segment}", self.0)))
    }
}

identifier!(
    /// A hold, chosen by the client; the idempotency key of a reserve.
    HoldId
);
identifier!(
    /// A buyer, needed for per-user limits.
    UserId
);
identifier!(
    /// A lease lock.
    LockName
);
identifier!(
    /// The holder of a lease lock.
    OwnerId
);
identifier!(
    /// A client's name for one write that is not a hold (a restock), so that a retry of it
    /// changes nothing.
    RequestId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_edges() {
        assert!(PoolId::parse("a").is_ok());
        assert!(PoolId::parse(&"a".repeat(128)).is_ok());
        assert_eq!(PoolId::parse(&"a".repeat(129)), Err(IdError::TooLong));
        assert_eq!(PoolId::parse(""), Err(IdError::Empty));
        assert_eq!(PoolId::parse("-a"), Err(IdError::BadFirstByte));
        assert_eq!(PoolId::parse(".a"), Err(IdError::BadFirstByte));
        assert_eq!(PoolId::parse("a b"), Err(IdError::BadByte));
        assert_eq!(PoolId::parse("a/b"), Err(IdError::BadByte));
        assert_eq!(PoolId::parse("aé"), Err(IdError::BadByte));
        assert!(PoolId::parse("Sku-1.2_x:y").is_ok());
        assert!(PoolId::parse("9").is_ok());
    }

    #[test]
    fn deserialized_from_borrowed_escaped_and_owned_text() {
        let borrowed: HoldId = serde_json::from_str(r#""order-1""#).unwrap();
        assert_eq!(borrowed.as_str(), "order-1");
        // An escape makes serde_json unescape into its scratch buffer: a transient str.
        let escaped: HoldId = serde_json::from_str(r#""order-\u0032""#).unwrap();
        assert_eq!(escaped.as_str(), "order-2");
        let owned: HoldId = serde_json::from_value(serde_json::json!("order-3")).unwrap();
        assert_eq!(owned.as_str(), "order-3");
        let logged = postcard::to_allocvec(&owned).unwrap();
        assert_eq!(postcard::from_bytes::<HoldId>(&logged).unwrap(), owned);
    }

    #[test]
    fn deserializing_refusals_keep_their_words() {
        let bad = serde_json::from_str::<PoolId>(r#""a b""#).unwrap_err();
        assert!(
            bad.to_string().starts_with(
                "\"a b\": may only contain ASCII letters, digits, '.', '_', ':' and '-'"
            ),
            "{bad}"
        );
        let not_text = serde_json::from_str::<PoolId>("5").unwrap_err();
        assert!(
            not_text
                .to_string()
                .starts_with("invalid type: integer `5`, expected a string"),
            "{not_text}"
        );
    }
}
