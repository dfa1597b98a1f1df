//! Enables the AVX-512 and AVX2 ring kernels on compilers that have stable AVX-512
//! intrinsics and safe `#[target_feature]` functions (Rust 1.89 and later); older
//! compilers within the crate's MSRV build the portable kernel only.

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(puma_avx512)");
    println!("cargo::rustc-check-cfg=cfg(puma_avx2)");
    println!("cargo::rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let minor = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()));
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo::rustc-cfg=puma_avx512");
        println!("cargo::rustc-cfg=puma_avx2");
    }
}
