//! Fuzz target `cache_fields`: see `switchyard_engine::fuzz::cache_fields` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::cache_fields(data));
