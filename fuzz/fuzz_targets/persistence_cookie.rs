//! Fuzz target `persistence_cookie`: see `switchyard_engine::fuzz::persistence_cookie` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::persistence_cookie(data));
