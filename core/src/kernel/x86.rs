//! CPUID and XCR0 probes for the SIMD kernels (no OS or std needed).
#![allow(unsafe_code)]

/// CPUID leaf 7 (sub-leaf 0) EBX, if the OS enabled XSAVE/XGETBV (leaf 1 ECX bit 27) and
/// the CPU has leaf 7.
pub(super) fn leaf7_ebx() -> Option<u32> {
    let leaf1 = core::arch::x86_64::__cpuid(1);
    if leaf1.ecx & (1 << 27) == 0 || core::arch::x86_64::__cpuid(0).eax < 7 {
        return None;
    }
    Some(core::arch::x86_64::__cpuid_count(7, 0).ebx)
}

/// Whether the OS saves every register state in `mask` (XCR0 bits). Call only after
/// [`leaf7_ebx`] returned `Some`, which checked that XGETBV is enabled.
pub(super) fn os_saves(mask: u64) -> bool {
    if leaf7_ebx().is_none() {
        return false;
    }
    // SAFETY: OSXSAVE (checked by `leaf7_ebx`) means the OS enabled XGETBV, so the
    // instruction cannot fault.
    let xcr0 = unsafe { xcr0() };
    xcr0 & mask == mask
}

/// Reads XCR0.
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE.
    unsafe { core::arch::x86_64::_xgetbv(0) }
}
