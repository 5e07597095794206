//! Fuzz target `deflate`: see `switchyard_engine::fuzz::deflate` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::deflate(data));
