//! Fuzz target `config`: see `switchyard_engine::fuzz::config` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::config(data));
