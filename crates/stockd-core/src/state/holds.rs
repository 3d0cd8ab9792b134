//! The retained holds, kept in pages that a snapshot build shares copy-on-write with the live
//! state.
//!
//! A snapshot must encode the state of one moment while the writer goes on changing it. Holds
//! are nearly all of that state (millions of them, kept for the refund window), so they live in
//! pages of [`PAGE`] slots behind `Arc`s: [`HoldStore::frozen`] hands a snapshot build the
//! pages as they are, a few thousand reference counts for millions of holds, and the writer's
//! next change to a page still shared copies that page alone (`Arc::make_mut`). A build thus
//! costs the pages the writer touches while it runs, not a second copy of every hold.
//!
//! A hold is found through an index of its id to its slot (which page, which place in it);
//! slots freed by removed holds are reused by new ones. Serialised as one map of hold id to
//! hold, entry for entry what a `HashMap` gives, so that snapshots keep their format.

use std::fmt;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::sharded::ShardedSlots;
use super::Hold;
use crate::ids::HoldId;

/// Slots per page. A page of holds is about 48 KiB: small enough that copying one the writer
/// touches during a snapshot build costs a few microseconds, large enough that freezing ten
/// million holds hands over 20,000 pages.
const PAGE: usize = 512;

/// Up to [`PAGE`] slots; a page grows to [`PAGE`] slots and stays there.
#[derive(Clone, Default)]
struct Page {
    slots: Vec<Option<(HoldId, Hold)>>,
}

/// Every retained hold by id.
#[derive(Default)]
pub(super) struct HoldStore {
    pages: HoldPages,
    /// The slot of each hold (`page * PAGE + place`), by its id (read from the slot).
    slots: ShardedSlots,
    /// Slots emptied by removals, reused first.
    free: Vec<u32>,
}

/// The pages of a [`HoldStore`], shared: what a snapshot build encodes.
#[derive(Clone, Default)]
pub struct HoldPages {
    pages: Vec<Arc<Page>>,
    len: usize,
}

impl HoldPages {
    /// Every hold, page by page (in no particular order, like a `HashMap`'s).
    pub(super) fn iter(&self) -> impl Iterator<Item = (&HoldId, &Hold)> {
        self.pages.iter().flat_map(|page| {
            (page.slots.iter()).filter_map(|slot| slot.as_ref().map(|(id, hold)| (id, hold)))
        })
    }

    /// The id of the hold in `slot`, which must hold one.
    fn id(&self, slot: u32) -> &HoldId {
        &self.slot(slot).expect("an indexed slot holds a hold").0
    }

    fn slot(&self, slot: u32) -> Option<&(HoldId, Hold)> {
        let slot = slot as usize;
        self.pages[slot / PAGE].slots[slot % PAGE].as_ref()
    }

    /// The slot for writing: its page is copied first if a snapshot build still shares it.
    fn slot_mut(&mut self, slot: u32) -> &mut Option<(HoldId, Hold)> {
        let slot = slot as usize;
        &mut Arc::make_mut(&mut self.pages[slot / PAGE]).slots[slot % PAGE]
    }

    /// A slot never used yet, at the end of the last page or on a new one.
    fn grow(&mut self) -> u32 {
        if self
            .pages
            .last()
            .is_none_or(|page| page.slots.len() == PAGE)
        {
            self.pages.push(Arc::new(Page {
                slots: Vec::with_capacity(PAGE),
            }));
        }
        let last = self.pages.len() - 1;
        let page = Arc::make_mut(&mut self.pages[last]);
        page.slots.push(None);
        u32::try_from(last * PAGE + page.slots.len() - 1).expect("fewer than 4 billion holds")
    }
}

impl HoldStore {
    pub(super) fn new() -> Self {
        Self::default()
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The slot of hold `id`: where it stays until it is removed.
    pub(super) fn slot_of(&self, id: &HoldId) -> Option<u32> {
        self.slots.get(id, |slot| self.pages.id(slot))
    }

    pub(super) fn get(&self, id: &HoldId) -> Option<&Hold> {
        let slot = self.slot_of(id)?;
        self.pages.slot(slot).map(|(_, hold)| hold)
    }

    pub(super) fn get_mut(&mut self, id: &HoldId) -> Option<&mut Hold> {
        let slot = self.slot_of(id)?;
        self.pages.slot_mut(slot).as_mut().map(|(_, hold)| hold)
    }

    pub(super) fn contains_key(&self, id: &HoldId) -> bool {
        self.slot_of(id).is_some()
    }

    /// Inserts or replaces; returns the hold replaced.
    /// The hold in `slot`, which has one.
    pub(super) fn at(&self, slot: u32) -> (&HoldId, &Hold) {
        let (id, hold) = self.pages.slot(slot).expect("a slot in use");
        (id, hold)
    }

    /// The slots in use, in the order of `iter`.
    pub(super) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        (self.pages.pages.iter().enumerate()).flat_map(|(page, slots)| {
            (slots.slots.iter().enumerate())
                .filter(|(_, slot)| slot.is_some())
                .map(move |(at, _)| u32::try_from(page * PAGE + at).expect("a u32 slot"))
        })
    }

    /// Puts `hold` in the slot of `id`, a free one if it is new: the slot, and the hold it
    /// replaced.
    pub(super) fn insert(&mut self, id: HoldId, hold: Hold) -> (u32, Option<Hold>) {
        if let Some(slot) = self.slot_of(&id) {
            let (_, old) = self.pages.slot_mut(slot).as_mut().expect("an indexed slot");
            return (slot, Some(std::mem::replace(old, hold)));
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => self.pages.grow(),
        };
        *self.pages.slot_mut(slot) = Some((id, hold));
        let pages = &self.pages;
        self.slots
            .insert(pages.id(slot), slot, |slot| pages.id(slot));
        self.pages.len += 1;
        (slot, None)
    }

    /// Adds a hold whose id is new, with one lookup: false, and nothing added, if it is not.
    fn insert_new(&mut self, id: HoldId, hold: Hold) -> bool {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => self.pages.grow(),
        };
        *self.pages.slot_mut(slot) = Some((id, hold));
        let pages = &self.pages;
        if !self
            .slots
            .insert_new(pages.id(slot), slot, |slot| pages.id(slot))
        {
            *self.pages.slot_mut(slot) = None;
            self.free.push(slot);
            return false;
        }
        self.pages.len += 1;
        true
    }

    pub(super) fn remove(&mut self, id: &HoldId) -> Option<Hold> {
        let pages = &self.pages;
        let slot = self.slots.remove(id, |slot| pages.id(slot))?;
        let (_, hold) = self.pages.slot_mut(slot).take().expect("an indexed slot");
        self.free.push(slot);
        self.pages.len -= 1;
        Some(hold)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&HoldId, &Hold)> {
        self.pages.iter()
    }

    /// The bytes the holds take on the heap, by what they own: (pages, the ids' and item
    /// lists' allocations, the id-to-slot index). Estimates: the allocator rounds each
    /// allocation up (here to 16 bytes); users and pools are shared, counted elsewhere.
    pub(super) fn heap_bytes(&self) -> (usize, usize, usize) {
        use std::mem::size_of;
        let rounded = |bytes: usize| bytes.div_ceil(16) * 16;
        // An `Arc`'s allocation: two counts, then the data.
        let arc = |data: usize| rounded(2 * size_of::<usize>() + data);
        let slot = size_of::<Option<(HoldId, Hold)>>();
        let pages = (self.pages.pages.iter())
            .map(|page| arc(size_of::<Page>()) + page.slots.capacity() * slot)
            .sum::<usize>()
            + self.pages.pages.capacity() * size_of::<Arc<Page>>()
            + self.free.capacity() * size_of::<u32>();
        let owned: usize = (self.iter())
            .map(|(id, hold)| {
                let items = hold.items.heap_bytes();
                arc(id.as_str().len()) + if items == 0 { 0 } else { rounded(items) }
            })
            .sum();
        (pages, owned, self.slots.heap_bytes())
    }

    /// The holds as they are now, for a snapshot build: the pages are shared, and a change
    /// made from now on copies the page it lands on rather than touching what was handed out.
    pub(super) fn frozen(&self) -> HoldPages {
        self.pages.clone()
    }
}

impl std::ops::Index<&HoldId> for HoldStore {
    type Output = Hold;

    fn index(&self, id: &HoldId) -> &Hold {
        self.get(id).unwrap_or_else(|| panic!("no hold {id}"))
    }
}

/// A copy shares the pages (copy-on-write) and copies the index.
impl Clone for HoldStore {
    fn clone(&self) -> Self {
        HoldStore {
            pages: self.pages.clone(),
            slots: self.slots.clone(),
            free: self.free.clone(),
        }
    }
}

/// Equal when they hold the same holds under the same ids, wherever the slots.
impl PartialEq for HoldStore {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(id, hold)| other.get(id).is_some_and(|theirs| theirs == hold))
    }
}

impl Eq for HoldStore {}

impl fmt::Debug for HoldStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for HoldPages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (id, hold) in self.iter() {
            map.serialize_entry(id, hold)?;
        }
        map.end()
    }
}

impl Serialize for HoldStore {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.pages.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HoldStore {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HoldsVisitor;

        impl<'de> Visitor<'de> for HoldsVisitor {
            type Value = HoldStore;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of hold ids to holds")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<HoldStore, A::Error> {
                let mut holds = HoldStore::new();
                if let Some(len) = access.size_hint() {
                    // A count read from the input: bounded (a hundred megabytes of room at
                    // most), so that a corrupt one cannot ask for all the memory there is.
                    let len = len.min(1 << 24);
                    holds.pages.pages.reserve(len.div_ceil(PAGE));
                    let pages = &holds.pages;
                    holds.slots.reserve(len, |slot| pages.id(slot));
                }
                while let Some((id, hold)) = access.next_entry::<HoldId, Hold>()? {
                    if !holds.insert_new(id, hold) {
                        return Err(serde::de::Error::custom("a hold id twice"));
                    }
                }
                Ok(holds)
            }
        }

        deserializer.deserialize_map(HoldsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::super::HoldItems;
    use super::*;
    use crate::view::HoldStatus;

    fn hold(at_ms: u64) -> Hold {
        Hold {
            user: None,
            items: HoldItems::Many(Arc::from(Vec::new())),
            generation_watermark: 0,
            confirm: false,
            status: HoldStatus::Held,
            created_at_ms: at_ms,
            expires_at_ms: at_ms,
            finished_at_ms: None,
        }
    }

    /// A snapshot naming a hold twice is not one stockd wrote: decoding it fails, and keeps
    /// neither.
    #[test]
    fn a_hold_id_twice_does_not_decode() {
        struct Twice(Vec<(HoldId, Hold)>);
        impl Serialize for Twice {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(self.0.iter().map(|(id, hold)| (id, hold)))
            }
        }
        let once = Twice(vec![(id(1), hold(1)), (id(2), hold(2))]);
        let bytes = postcard::to_allocvec(&once).unwrap();
        let store: HoldStore = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(store.len(), 2);
        let twice = Twice(vec![(id(1), hold(1)), (id(2), hold(2)), (id(1), hold(3))]);
        let bytes = postcard::to_allocvec(&twice).unwrap();
        assert!(postcard::from_bytes::<HoldStore>(&bytes).is_err());
    }

    /// A retained hold's record, its id and its one item inline, is what a page slot takes:
    /// every byte here is a megabyte at a million holds.
    #[test]
    fn a_slot_is_at_most_104_bytes() {
        assert!(size_of::<Option<(HoldId, Hold)>>() <= 104);
    }

    fn id(n: u16) -> HoldId {
        HoldId::parse(&format!("h{n}")).unwrap()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u64),
        Change(u16, u64),
        Remove(u16),
        Freeze,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Ids from a range a few pages wide, so that pages fill, empty and fill again.
        let n = 0..(3 * PAGE as u16);
        prop_oneof![
            6 => (n.clone(), any::<u64>()).prop_map(|(n, v)| Op::Insert(n, v)),
            3 => (n.clone(), any::<u64>()).prop_map(|(n, v)| Op::Change(n, v)),
            4 => n.prop_map(Op::Remove),
            1 => Just(Op::Freeze),
        ]
    }

    fn contents<'a>(holds: impl Iterator<Item = (&'a HoldId, &'a Hold)>) -> HashMap<HoldId, u64> {
        holds
            .map(|(id, hold)| (id.clone(), hold.created_at_ms))
            .collect()
    }

    proptest! {
        // Each case runs thousands of operations over several pages.
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The store is a map (against a `HashMap`), and every frozen copy keeps what the store
        /// held when it was taken, whatever the store does after.
        #[test]
        fn is_a_map_and_a_frozen_copy_never_moves(ops in prop::collection::vec(op(), 1..3_000)) {
            let mut holds = HoldStore::new();
            let mut model: HashMap<HoldId, u64> = HashMap::new();
            let mut frozen = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(n, v) => {
                        let replaced = holds.insert(id(n), hold(v)).1.map(|h| h.created_at_ms);
                        prop_assert_eq!(replaced, model.insert(id(n), v));
                    }
                    Op::Change(n, v) => {
                        if let Some(hold) = holds.get_mut(&id(n)) {
                            hold.created_at_ms = v;
                        }
                        if let Some(value) = model.get_mut(&id(n)) {
                            *value = v;
                        }
                    }
                    Op::Remove(n) => {
                        let removed = holds.remove(&id(n)).map(|h| h.created_at_ms);
                        prop_assert_eq!(removed, model.remove(&id(n)));
                    }
                    Op::Freeze => frozen.push((holds.frozen(), model.clone())),
                }
                prop_assert_eq!(holds.len(), model.len());
            }
            prop_assert_eq!(contents(holds.iter()), model.clone());
            for (n, value) in &model {
                prop_assert_eq!(holds[n].created_at_ms, *value);
                prop_assert!(holds.contains_key(n));
            }
            for (pages, then) in &frozen {
                prop_assert_eq!(pages.len, then.len());
                prop_assert_eq!(contents(pages.iter()), then.clone());
            }
            // Serialised as a map, it reads back as the same holds.
            let bytes = postcard::to_allocvec(&holds).unwrap();
            let read: HoldStore = postcard::from_bytes(&bytes).unwrap();
            prop_assert_eq!(&read, &holds);
            prop_assert_eq!(postcard::to_allocvec(&holds.frozen()).unwrap(), bytes);
        }
    }
}
