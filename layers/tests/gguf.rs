//! The GGUF reader on hand-built files: metadata and tensors read back, exact
//! dequantisation, and typed errors (never panics) on truncated or malformed files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use half::f16;
use puma_layers::gguf::{GgufError, GgufFile, GgufValue};
use puma_layers::llama::{LlamaLoadError, load_gguf};

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file with two metadata keys and three tensors: `a` F32 [2, 2], `q` Q8_0 [32],
/// `r` Q4_1 [32].
fn sample() -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&3u64.to_le_bytes()); // tensors
    f.extend_from_slice(&2u64.to_le_bytes()); // metadata
    string(&mut f, "general.architecture");
    f.extend_from_slice(&8u32.to_le_bytes());
    string(&mut f, "llama");
    string(&mut f, "x.list");
    f.extend_from_slice(&9u32.to_le_bytes());
    f.extend_from_slice(&4u32.to_le_bytes()); // u32 items
    f.extend_from_slice(&2u64.to_le_bytes());
    f.extend_from_slice(&7u32.to_le_bytes());
    f.extend_from_slice(&9u32.to_le_bytes());
    let tensors: [(&str, &[u64], u32, u64); 3] = [
        ("a", &[2, 2], 0, 0),
        ("q", &[32], 8, 32),
        ("r", &[32], 3, 96),
    ];
    for (name, dims, ty, off) in tensors {
        string(&mut f, name);
        f.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            f.extend_from_slice(&d.to_le_bytes());
        }
        f.extend_from_slice(&ty.to_le_bytes());
        f.extend_from_slice(&off.to_le_bytes());
    }
    while f.len() % 32 != 0 {
        f.push(0);
    }
    let base = f.len();
    for v in [1.5f32, -2.0, 0.25, 8.0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.resize(base + 32, 0);
    f.extend_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
    f.extend((0..32).map(|j: i32| (j - 16) as i8 as u8));
    f.resize(base + 96, 0);
    f.extend_from_slice(&f16::from_f32(0.25).to_bits().to_le_bytes());
    f.extend_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
    f.extend((0..16u8).map(|j| j | (15 << 4)));
    f
}

#[test]
fn reads_metadata_and_dequantizes() {
    let g = GgufFile::from_bytes(sample()).unwrap();
    assert_eq!(g.meta_str("general.architecture").unwrap(), "llama");
    assert_eq!(
        g.metadata()["x.list"],
        GgufValue::Array(vec![GgufValue::Uint(7), GgufValue::Uint(9)])
    );
    assert_eq!(g.tensors().len(), 3);
    let (a, dims) = g.dequantize("a").unwrap();
    assert_eq!((a, dims), (vec![1.5, -2.0, 0.25, 8.0], vec![2, 2]));
    let (q, _) = g.dequantize("q").unwrap();
    assert_eq!(q[0], -8.0);
    assert_eq!(q[31], 7.5);
    let (r, _) = g.dequantize("r").unwrap();
    assert_eq!(r[3], -1.0 + 0.25 * 3.0);
    assert_eq!(r[16], -1.0 + 0.25 * 15.0);
    assert!(matches!(
        g.dequantize("zz"),
        Err(GgufError::MissingTensor(_))
    ));
    assert!(matches!(
        g.meta_u64("general.architecture"),
        Err(GgufError::Metadata { .. })
    ));
}

#[test]
fn malformed_files_are_typed_errors() {
    let good = sample();
    // Every truncation fails cleanly.
    for cut in 0..good.len() {
        assert!(
            GgufFile::from_bytes(good[..cut].to_vec()).is_err(),
            "cut at {cut}"
        );
    }
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(
        GgufFile::from_bytes(bad),
        Err(GgufError::BadMagic)
    ));
    let mut bad = good.clone();
    bad[4] = 9;
    assert!(matches!(
        GgufFile::from_bytes(bad),
        Err(GgufError::UnsupportedVersion(9))
    ));
    // A huge tensor count is refused before any allocation.
    let mut bad = good.clone();
    bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        GgufFile::from_bytes(bad),
        Err(GgufError::Malformed(_))
    ));
    // Flip every byte of the header and directory in turn: errors or a parse, never a panic.
    let dir_end = good.len() - 116;
    for i in 0..dir_end {
        let mut f = good.clone();
        f[i] ^= 0xA5;
        let _ = GgufFile::from_bytes(f).map(|g| {
            for t in g.tensors().to_vec() {
                let _ = g.dequantize(&t.name);
            }
        });
    }
    // An unsupported type is reported when the tensor is requested.
    let mut f = good.clone();
    let q_type_at = {
        // The type field of tensor "a" follows its name and two dims.
        let name_at = f
            .windows(9)
            .position(|w| w == [1, 0, 0, 0, 0, 0, 0, 0, b'a'])
            .unwrap();
        name_at + 9 + 4 + 16
    };
    f[q_type_at..q_type_at + 4].copy_from_slice(&2u32.to_le_bytes()); // Q4_0
    let g = GgufFile::from_bytes(f).unwrap();
    assert!(matches!(
        g.dequantize("a"),
        Err(GgufError::UnsupportedType { ggml_type: 2, .. })
    ));
    // Loading a LLaMA model from a file without the LLaMA keys is a typed error too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, &good).unwrap();
    assert!(matches!(load_gguf(&path), Err(LlamaLoadError::Config(_))));
    assert!(matches!(
        load_gguf(&dir.path().join("missing.gguf")),
        Err(LlamaLoadError::Io { .. })
    ));
}
