//! Fuzz target `hpack`: see `switchyard_engine::fuzz::hpack` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::hpack(data));
