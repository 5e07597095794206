//! Fuzz target `client_hello`: see `switchyard_engine::fuzz::client_hello` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::client_hello(data));
