//! Fuzz target `http2_server`: see `switchyard_engine::fuzz::http2_server` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::http2_server(data));
