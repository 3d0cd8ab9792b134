//! Arbitrary bytes as HTTP requests to stockd's router; see `stockd_fuzz::request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stockd_fuzz::request::run(data));
