//! Lists over every partition: each partition answers its page of pools or holds in id order,
//! and the pages are merged here into one page in id order. The merge must never skip or
//! repeat an item across pages: a page ends where the partition that examined least stopped.

use stockd_core::{BackendError, Command, HoldId, HoldView, Outcome, Reply};

use crate::backend::RedisBackend;
use crate::wire::{self, Answer, Route};

impl RedisBackend {
    /// Lists pools across every partition: each gives its page in id order, merged here.
    pub(crate) async fn list_pools(&self, command: &Command) -> Result<Outcome, BackendError> {
        let Command::ListPools { limit, .. } = command else {
            unreachable!("list_pools takes ListPools")
        };
        let mut pools = Vec::new();
        let mut more = false;
        for partition in 0..self.shared.partitions {
            match self
                .shared
                .submit_one(partition, wire::encode(command, Route::Only))
                .await?
            {
                Answer::PoolPage {
                    pools: page,
                    more: page_more,
                    spread,
                } => {
                    for mut pool in page {
                        // A spread pool's counts are its segments' sums, as of one instant.
                        if spread.iter().any(|id| id == pool.pool.as_str()) {
                            if let Some(states) =
                                self.shared.collect(&pool.pool, pool.segments).await?
                            {
                                pool = self.shared.whole_pool(&pool.pool, &states);
                            }
                        }
                        pools.push(pool);
                    }
                    more |= page_more;
                }
                Answer::Done(Err(error)) => return Ok(Err(error)),
                other => {
                    return Err(BackendError::Unavailable(format!(
                        "unexpected answer {other:?}"
                    )))
                }
            }
        }
        pools.sort_by(|a, b| a.pool.cmp(&b.pool));
        if pools.len() > *limit {
            pools.truncate(*limit);
            more = true;
        }
        let next = if more {
            pools.last().map(|p| p.pool.clone())
        } else {
            None
        };
        Ok(Ok(Reply::PoolList { pools, next }))
    }

    /// Lists holds across every partition: each gives its page in id order with how far it
    /// examined, and the pages are merged here in hold id order. A partition that stopped early
    /// (its page full, or its examination bound reached) has seen nothing past its `next`, so
    /// the merged page ends at the lowest such `next`: no hold is skipped or listed twice.
    pub(crate) async fn list_holds(&self, command: &Command) -> Result<Outcome, BackendError> {
        let Command::ListHolds { limit, .. } = command else {
            unreachable!("list_holds takes ListHolds")
        };
        let mut pages = Vec::with_capacity(self.shared.partitions as usize);
        for partition in 0..self.shared.partitions {
            match self
                .shared
                .submit_one(partition, wire::encode(command, Route::Only))
                .await?
            {
                Answer::HoldPage { holds, next } => pages.push((holds, next)),
                Answer::Done(Err(error)) => return Ok(Err(error)),
                other => {
                    return Err(BackendError::Unavailable(format!(
                        "unexpected answer {other:?}"
                    )))
                }
            }
        }
        let (holds, next) = merge_hold_pages(pages, *limit);
        Ok(Ok(Reply::HoldList { holds, next }))
    }
}

/// Merges partitions' pages of holds (each in hold id order, with the `next` it answered) into
/// one page of at most `limit` holds in hold id order. Every partition has examined all its ids
/// up to its `next` (all of them when `None`), so the merge may only answer holds up to the
/// lowest `next`: past it, a partition may hold ids it has not shown.
fn merge_hold_pages(
    pages: Vec<(Vec<HoldView>, Option<HoldId>)>,
    limit: usize,
) -> (Vec<HoldView>, Option<HoldId>) {
    let frontier = pages.iter().filter_map(|(_, next)| next.clone()).min();
    // A k-way merge of sorted pages: each step takes the least head.
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<HoldView>>> = pages
        .into_iter()
        .map(|(holds, _)| holds.into_iter().peekable())
        .collect();
    let mut holds = Vec::with_capacity(limit);
    loop {
        let least = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(index, head)| head.peek().map(|hold| (index, hold.hold_id.clone())))
            .min_by(|a, b| a.1.cmp(&b.1));
        let Some((index, hold_id)) = least else {
            return (holds, frontier);
        };
        if frontier
            .as_ref()
            .is_some_and(|frontier| hold_id > *frontier)
        {
            return (holds, frontier);
        }
        if holds.len() == limit {
            let next = holds.last().map(|hold: &HoldView| hold.hold_id.clone());
            return (holds, next);
        }
        holds.push(heads[index].next().expect("peeked"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(id: &str) -> HoldView {
        HoldView {
            hold_id: HoldId::parse(id).unwrap(),
            status: stockd_core::HoldStatus::Held,
            user: None,
            items: Vec::new().into(),
            created_at_ms: 0,
            expires_at_ms: 1_000,
            finished_at_ms: None,
            partition: 0,
        }
    }

    fn ids(holds: &[HoldView]) -> Vec<&str> {
        holds.iter().map(|hold| hold.hold_id.as_str()).collect()
    }

    fn page(list: &[&str], next: Option<&str>) -> (Vec<HoldView>, Option<HoldId>) {
        (
            list.iter().map(|id| hold(id)).collect(),
            next.map(|id| HoldId::parse(id).unwrap()),
        )
    }

    #[test]
    fn hold_pages_merge_in_order_up_to_the_lowest_next() {
        // Both partitions exhausted: everything, in order, up to the limit.
        let (holds, next) = merge_hold_pages(vec![page(&["a", "c"], None), page(&["b"], None)], 10);
        assert_eq!(ids(&holds), ["a", "b", "c"]);
        assert_eq!(next, None);
        // The limit cuts the merged page: next is its last hold.
        let (holds, next) = merge_hold_pages(vec![page(&["a", "c"], None), page(&["b"], None)], 2);
        assert_eq!(ids(&holds), ["a", "b"]);
        assert_eq!(next.unwrap().as_str(), "b");
        // A partition that stopped at "c" has not looked past it: "d" must wait for the next
        // page, which starts after "c".
        let (holds, next) = merge_hold_pages(
            vec![page(&["a", "d"], None), page(&["b", "c"], Some("c"))],
            10,
        );
        assert_eq!(ids(&holds), ["a", "b", "c"]);
        assert_eq!(next.unwrap().as_str(), "c");
        // A partition that examined its bound without a match still holds the page back.
        let (holds, next) =
            merge_hold_pages(vec![page(&["m", "z"], None), page(&[], Some("k"))], 10);
        assert!(holds.is_empty());
        assert_eq!(next.unwrap().as_str(), "k");
    }
}
