//! The C ABI's plain functions, called as C would call them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unsafe_code)]

use std::ffi::CStr;
use std::ptr;

use puma_ffi::{puma_fixed_decode, puma_fixed_encode, puma_status, puma_status_name, puma_version};

#[test]
fn fixed_encode_checks_pointers_and_arguments() {
    let mut out = 0u64;
    // SAFETY: `out` is a valid, aligned u64 on the stack.
    let st = unsafe { puma_fixed_encode(1.5, 18, &mut out) };
    assert_eq!(st, puma_status::PUMA_OK);
    assert_eq!(out, 3 << 17); // 1.5 · 2^18 = 393216
    assert_eq!(out, 393_216);

    // SAFETY: a null `out` is allowed and must be reported, not dereferenced.
    let st = unsafe { puma_fixed_encode(1.5, 18, ptr::null_mut()) };
    assert_eq!(st, puma_status::PUMA_ERR_NULL_POINTER);

    let mut untouched = 77u64;
    for (x, f) in [
        (f64::NAN, 18),
        (f64::INFINITY, 18),
        (1e30, 18),
        (1.0, 0),
        (1.0, 41),
    ] {
        // SAFETY: `untouched` is a valid, aligned u64 on the stack.
        let st = unsafe { puma_fixed_encode(x, f, &mut untouched) };
        assert_eq!(st, puma_status::PUMA_ERR_INVALID_ARGUMENT, "x={x} f={f}");
    }
    assert_eq!(untouched, 77);

    // Negative values are two's complement; decode inverts encode.
    // SAFETY: `out` is a valid, aligned u64 on the stack.
    assert_eq!(
        unsafe { puma_fixed_encode(-0.25, 12, &mut out) },
        puma_status::PUMA_OK
    );
    assert_eq!(out, (-1024i64) as u64);
    let mut back = 0.0f64;
    // SAFETY: `back` is a valid, aligned f64 on the stack.
    assert_eq!(
        unsafe { puma_fixed_decode(out, 12, &mut back) },
        puma_status::PUMA_OK
    );
    assert_eq!(back, -0.25);
    // SAFETY: a null `out` is allowed and must be reported.
    assert_eq!(
        unsafe { puma_fixed_decode(out, 12, ptr::null_mut()) },
        puma_status::PUMA_ERR_NULL_POINTER
    );
}

#[test]
fn version_and_status_names_are_static_c_strings() {
    // SAFETY: puma_version returns a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(puma_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    // SAFETY: puma_status_name returns a static NUL-terminated string for any input.
    let name = |s: u32| {
        unsafe { CStr::from_ptr(puma_status_name(s)) }
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(name(puma_status::PUMA_OK as u32), "PUMA_OK");
    assert_eq!(name(puma_status::PUMA_ERR_PANIC as u32), "PUMA_ERR_PANIC");
    assert_eq!(name(99), "PUMA_UNKNOWN_STATUS");
}

#[test]
fn every_status_has_its_name_and_code() {
    for (code, s) in puma_status::ALL.into_iter().enumerate() {
        assert_eq!(s as usize, code);
        // SAFETY: puma_status_name returns a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(puma_status_name(code as u32)) }
            .to_str()
            .unwrap();
        assert_eq!(format!("{s:?}"), name);
        let line = format!("  {name} = {code},");
        assert!(
            include_str!("../include/puma.h").contains(&line),
            "header lacks `{line}`"
        );
    }
}
