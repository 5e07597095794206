//! Fuzz target `rules`: see `switchyard_engine::fuzz::rules` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::rules(data));
