//! Fuzz target `request_head`: see `switchyard_engine::fuzz::request_head` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::request_head(data));
