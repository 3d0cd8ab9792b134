//! Arbitrary bytes as command sequences applied to stockd-core's State; see
//! `stockd_fuzz::sequence`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stockd_fuzz::sequence::run(data));
