//! Fuzz target `rdp_cookie`: see `switchyard_engine::fuzz::rdp_cookie` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_engine::fuzz::rdp_cookie(data));
