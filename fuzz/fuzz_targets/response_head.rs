//! Fuzz target `response_head`: see `switchyard_engine::fuzz::response_head` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::response_head(data));
