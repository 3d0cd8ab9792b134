//! `HoldItems`: a hold's items, the one item most holds have kept inline in the hold's record,
//! several behind one shared allocation.
//!
//! A retained hold is kept a week; an `Arc<[HoldItem]>` of one item is a 48-byte allocation
//! (two counts, the pool id, the quantity) for each of them, where inline the record grows by
//! 16 bytes. Serialised as the sequence it derefs to, the bytes an `Arc<[HoldItem]>` had.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::command::HoldItem;

#[derive(Clone, PartialEq, Eq)]
pub(super) enum HoldItems {
    One([HoldItem; 1]),
    Many(Arc<[HoldItem]>),
}

impl HoldItems {
    /// `items` as a hold keeps them: inline if one, else in one allocation.
    pub(super) fn from_iter(mut items: impl ExactSizeIterator<Item = HoldItem>) -> HoldItems {
        match (items.len(), items.next()) {
            (1, Some(item)) => HoldItems::One([item]),
            (_, first) => HoldItems::Many(first.into_iter().chain(items).collect()),
        }
    }

    /// The items as the views and events hand them out: the allocation they share if there
    /// is one, else a new one.
    pub(super) fn to_arc(&self) -> Arc<[HoldItem]> {
        match self {
            HoldItems::One(one) => Arc::from(&one[..]),
            HoldItems::Many(many) => many.clone(),
        }
    }

    /// The bytes they own on the heap, beside the record (an `Arc`'s two counts and the items,
    /// before the allocator rounds it up).
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            HoldItems::One(_) => 0,
            HoldItems::Many(many) => {
                2 * size_of::<usize>() + std::mem::size_of_val::<[HoldItem]>(many)
            }
        }
    }
}

impl Deref for HoldItems {
    type Target = [HoldItem];

    fn deref(&self) -> &[HoldItem] {
        match self {
            HoldItems::One(one) => one,
            HoldItems::Many(many) => many,
        }
    }
}

impl fmt::Debug for HoldItems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for HoldItems {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for HoldItems {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Items;

        impl<'de> Visitor<'de> for Items {
            type Value = HoldItems;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence of hold items")
            }

            /// One item without a vector: a snapshot's million holds decode with no
            /// allocation for their items.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HoldItems, A::Error> {
                let Some(first) = seq.next_element::<HoldItem>()? else {
                    return Ok(HoldItems::Many(Arc::from(Vec::new())));
                };
                let Some(second) = seq.next_element::<HoldItem>()? else {
                    return Ok(HoldItems::One([first]));
                };
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64) + 2);
                items.push(first);
                items.push(second);
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(HoldItems::Many(Arc::from(items)))
            }
        }

        deserializer.deserialize_seq(Items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PoolId;

    fn items(n: usize) -> Vec<HoldItem> {
        (0..n)
            .map(|i| HoldItem {
                pool: PoolId::parse(&format!("p{i}")).unwrap(),
                qty: i as u64 + 1,
            })
            .collect()
    }

    #[test]
    fn items_keep_the_bytes_and_the_order_of_the_shared_slice() {
        for n in 0..5 {
            let shared: Arc<[HoldItem]> = Arc::from(items(n));
            let kept = HoldItems::from_iter(items(n).into_iter());
            assert_eq!(matches!(kept, HoldItems::One(_)), n == 1);
            assert_eq!(&kept[..], &shared[..]);
            assert_eq!(kept.to_arc(), shared);
            let bytes = postcard::to_allocvec(&kept).unwrap();
            assert_eq!(bytes, postcard::to_allocvec(&shared).unwrap());
            let back: HoldItems = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(back, kept);
            let json = serde_json::to_string(&kept).unwrap();
            assert_eq!(json, serde_json::to_string(&shared).unwrap());
        }
    }
}
