//! Fuzz target `proxy_protocol`: see `switchyard_engine::fuzz::proxy_protocol` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::proxy_protocol(data));
