//! Arbitrary bytes as an engine data directory's history and damage, then recovery; see
//! `stockd_fuzz::storage`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stockd_fuzz::storage::run(data));
