//! Fuzz target `http2_client`: see `switchyard_engine::fuzz::http2_client` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::http2_client(data));
