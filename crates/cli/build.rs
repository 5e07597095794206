//! Names the build in `switchyard --version` ("0.1.0 (dist, profile-guided)"), so a
//! benchmark report, which records that line, says which build it measured
//! (docs/benchmarking.md, docs/adr/0012-profile-guided-build.md).

fn main() {
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    let names = |what: &str| flags.iter().any(|f| f.contains(what));
    // Cargo tells a build script "release" for every profile that inherits it; the
    // profile's own name is the folder its outputs go to: <target>/<profile>/build/...
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    let parts: Vec<&str> = out.split(std::path::MAIN_SEPARATOR).collect();
    let profile =
        parts.iter().rposition(|p| *p == "build").and_then(|i| i.checked_sub(1)).map_or("unknown", |i| parts[i]);
    let guided = if names("profile-use") {
        ", profile-guided"
    } else if names("profile-generate") {
        ", instrumented"
    } else {
        ""
    };
    // The heap profilers' build (`--features system-alloc`) is named too: its CPU
    // figures are not switchyard's.
    let allocator = if std::env::var_os("CARGO_FEATURE_SYSTEM_ALLOC").is_some() { ", system allocator" } else { "" };
    println!("cargo:rustc-env=SWITCHYARD_BUILD={profile}{guided}{allocator}");
}
