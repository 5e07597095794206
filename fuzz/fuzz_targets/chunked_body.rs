//! Fuzz target `chunked_body`: see `switchyard_engine::fuzz::chunked_body` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::chunked_body(data));
