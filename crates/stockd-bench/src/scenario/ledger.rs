//! What came of the holds a run sent: created, refused, or unknown until the verdict asks the
//! server. Only the workload files holds here and only the verdict reads them back; neither
//! the ledger nor its chunked list decides anything.

use crate::http::Answer;

/// One hold the run sent: its id, its user and the units it asked of each pool.
#[derive(Clone, Debug)]
pub struct Sent {
    pub hold_id: String,
    pub user: Option<String>,
    pub units: Vec<(usize, u64)>,
}

/// A list that grows by chunks of fixed size: appending never moves what is already there. The
/// ledger of a run that creates millions of holds was a doubling vector, and the append that
/// doubled one of a million entries held the ledger's lock for a few hundred milliseconds,
/// which every worker then measured as the server's latency.
#[derive(Clone)]
pub(super) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new() }
    }
}

impl<T> Chunked<T> {
    const CHUNK: usize = 1 << 14;

    pub(super) fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < Self::CHUNK => chunk.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(Self::CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

/// What came of the holds the run sent: created (201), refused, or unknown.
#[derive(Default)]
pub(super) struct Ledger {
    pub created: Chunked<Sent>,
    pub unknown: Vec<Sent>,
    /// Per-op refusals and other answers, for the record.
    pub other: u64,
}

impl Ledger {
    /// Files the hold under created, unknown or refused by the answer to it; returns whether it
    /// was created.
    pub(super) fn file(&mut self, sent: Sent, answer: &Result<Answer, String>) -> bool {
        match answer {
            Ok(answer) if answer.status == 201 => {
                self.created.push(sent);
                return true;
            }
            Ok(answer) if answer.status == 503 => self.unknown.push(sent),
            Ok(_) => self.other += 1,
            Err(_) => self.unknown.push(sent),
        }
        false
    }
}
