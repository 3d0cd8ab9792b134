//! Adopting a dataset an operator accepted (`stockd redis accept`) while this server runs: a
//! call refused for `dataset_mismatch` looks at the marker Redis holds, and a marker of a later
//! epoch (only an accept writes one) replaces the one this server knew, with the seqs it saw on
//! the old dataset forgotten. It must never adopt a marker of the same or an earlier epoch: that
//! is a Redis that restarted empty, which this server refuses to serve.

use std::sync::atomic::Ordering;

use crate::dataset;
use crate::shared::Shared;

impl Shared {
    /// After a refusal: if an operator accepted a dataset (a marker of a later epoch), adopt it
    /// and forget the seqs seen on the old one. Returns whether it adopted one.
    pub(crate) async fn adopt_newer_marker(&self, why: &str) -> bool {
        if why != "dataset_mismatch" {
            return false;
        }
        let Ok(Some(found)) = dataset::read(&self.link, &self.keys[0]).await else {
            return false;
        };
        if found.epoch <= self.marker.lock().expect("marker lock").epoch {
            return false;
        }
        // An accept on a Redis that had lost everything leaves no fleet settings stored: the
        // first server to adopt it stores its own (the fleet's), and a server whose settings are
        // not the dataset's does not serve it.
        if let Err(error) =
            dataset::check_settings(&self.link, &self.keys, &self.config, &self.placement).await
        {
            tracing::error!(%error, "not adopting the dataset an operator accepted");
            return false;
        }
        let mut marker = self.marker.lock().expect("marker lock");
        if found.epoch <= marker.epoch {
            return false;
        }
        tracing::warn!(old = %marker.text, new = %found.text, "adopting a dataset accepted by an operator");
        *marker = found;
        self.marker_adopted.notify_one();
        for seen in self.seq_seen.iter().chain(&self.rev_seen) {
            seen.store(0, Ordering::Release);
        }
        for recheck in &self.recheck_parts {
            recheck.store(true, Ordering::Release);
        }
        true
    }
}
