//! A reader for GGUF files (llama.cpp's model format, versions 2 and 3): the metadata, the
//! tensor directory, and exact dequantisation of `F32`, `F16`, `Q8_0` and `Q4_1` tensors.
//!
//! The whole file is read into memory (no memory map, no `unsafe`). Every length, offset and
//! count in the file is checked against the file size before use, so a truncated or
//! malformed file gives a [`GgufError`], never a panic or an oversized allocation.
//!
//! Dequantisation follows ggml's reference code: a `Q4_1` block of 32 weights is an `f16`
//! scale `d`, an `f16` minimum `m` and 16 bytes of nibbles (weight `j` = `d·lo(q_j) + m`,
//! weight `j + 16` = `d·hi(q_j) + m`); a `Q8_0` block of 32 weights is an `f16` scale and 32
//! signed bytes (weight = `d·q`). Each weight is computed in `f32` as ggml does, so the
//! values equal what llama.cpp and `transformers` (via the `gguf` package) produce.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::f16;

/// Why a GGUF file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with the `GGUF` magic.
    #[error("not a GGUF file (bad magic)")]
    BadMagic,
    /// The format version is not 2 or 3.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends inside a structure, or a length or offset points outside it.
    #[error("GGUF file is truncated or malformed: {0}")]
    Malformed(String),
    /// A tensor's element type has no dequantiser here.
    #[error(
        "tensor {name} has ggml type {ggml_type}, supported: F32 (0), F16 (1), Q4_1 (3), Q8_0 (8)"
    )]
    UnsupportedType {
        /// The tensor's name.
        name: String,
        /// The ggml type id.
        ggml_type: u32,
    },
    /// A tensor the caller asked for is not in the file.
    #[error("tensor {0} is not in the GGUF file")]
    MissingTensor(String),
    /// A metadata key the caller needs is absent or has another type.
    #[error("GGUF metadata key {key} is missing or not {expected}")]
    Metadata {
        /// The key.
        key: String,
        /// The type expected.
        expected: &'static str,
    },
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Any unsigned integer type (u8, u16, u32, u64).
    Uint(u64),
    /// Any signed integer type (i8, i16, i32, i64).
    Int(i64),
    /// f32 (exactly widened) or f64.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string (invalid UTF-8 is replaced lossily).
    Str(String),
    /// An array of values.
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::Uint(v) => Some(v),
            GgufValue::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float (integers are converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::Float(v) => Some(v),
            GgufValue::Uint(v) => Some(v as f64),
            GgufValue::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml type ids this reader dequantises.
const GGML_F32: u32 = 0;
const GGML_F16: u32 = 1;
const GGML_Q4_1: u32 = 3;
const GGML_Q8_0: u32 = 8;

/// Weights per quantisation block.
const QK: usize = 32;

/// One tensor's directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor's GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// The dimensions in GGUF order: `dims[0]` varies fastest (a matrix `[ne0, ne1]` is
    /// row-major `ne1 × ne0`).
    pub dims: Vec<u64>,
    /// The ggml element type id.
    pub ggml_type: u32,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl GgufTensorInfo {
    /// The number of elements.
    pub fn numel(&self) -> Option<usize> {
        self.dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
    }
}

/// A GGUF file in memory: metadata, tensor directory and data.
pub struct GgufFile {
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    bytes: Vec<u8>,
    data_start: usize,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GgufFile {{ tensors: {}, metadata keys: {}, bytes: {} }}",
            self.tensors.len(),
            self.metadata.len(),
            self.bytes.len()
        )
    }
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| GgufError::Malformed(format!("unexpected end at byte {}", self.pos)))?;
        let s = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count that must fit the rest of the file at `min_size` bytes per item.
    fn count(&mut self, min_size: usize) -> Result<usize, GgufError> {
        let n = self.u64()?;
        let rest = self.buf.len().saturating_sub(self.pos) as u64;
        if n.saturating_mul(min_size.max(1) as u64) > rest {
            return Err(GgufError::Malformed(format!(
                "count {n} at byte {} exceeds the file",
                self.pos
            )));
        }
        usize::try_from(n).map_err(|_| GgufError::Malformed("count too large".into()))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.count(1)?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    fn value(&mut self, ty: u32, depth: u32) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            0 => GgufValue::Uint(u64::from(self.array::<1>()?[0])),
            1 => GgufValue::Int(i64::from(i8::from_le_bytes(self.array()?))),
            2 => GgufValue::Uint(u64::from(u16::from_le_bytes(self.array()?))),
            3 => GgufValue::Int(i64::from(i16::from_le_bytes(self.array()?))),
            4 => GgufValue::Uint(u64::from(self.u32()?)),
            5 => GgufValue::Int(i64::from(i32::from_le_bytes(self.array()?))),
            6 => GgufValue::Float(f64::from(f32::from_le_bytes(self.array()?))),
            7 => GgufValue::Bool(self.array::<1>()?[0] != 0),
            8 => GgufValue::Str(self.string()?),
            9 => {
                if depth > 4 {
                    return Err(GgufError::Malformed("arrays nested too deeply".into()));
                }
                let inner = self.u32()?;
                let n = self.count(1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(inner, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::Uint(self.u64()?),
            11 => GgufValue::Int(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::Float(f64::from_le_bytes(self.array()?)),
            other => {
                return Err(GgufError::Malformed(format!(
                    "unknown metadata value type {other}"
                )));
            }
        })
    }
}

/// Bytes of `n` elements of a supported ggml type, or `None` for an unsupported type or a
/// count that is not a whole number of blocks.
fn data_size(ggml_type: u32, n: usize) -> Option<usize> {
    match ggml_type {
        GGML_F32 => n.checked_mul(4),
        GGML_F16 => n.checked_mul(2),
        GGML_Q4_1 if n % QK == 0 => (n / QK).checked_mul(20),
        GGML_Q8_0 if n % QK == 0 => (n / QK).checked_mul(34),
        _ => None,
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    let lo = b.get(i).copied().unwrap_or(0);
    let hi = b.get(i + 1).copied().unwrap_or(0);
    f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Dequantises `Q4_1` blocks (20 bytes per 32 weights) into `out`.
pub fn dequantize_q4_1(data: &[u8], out: &mut Vec<f32>) {
    for block in data.chunks_exact(20) {
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        let qs = block.get(4..20).unwrap_or_default();
        out.extend(qs.iter().map(|&q| f32::from(q & 0x0F) * d + m));
        out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
    }
}

/// Dequantises `Q8_0` blocks (34 bytes per 32 weights) into `out`.
pub fn dequantize_q8_0(data: &[u8], out: &mut Vec<f32>) {
    for block in data.chunks_exact(34) {
        let d = f16_at(block, 0);
        let qs = block.get(2..34).unwrap_or_default();
        out.extend(qs.iter().map(|&q| f32::from(q as i8) * d));
    }
}

impl GgufFile {
    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// [`GgufError::Io`] if it cannot be read, and the errors of [`GgufFile::from_bytes`].
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let bytes = std::fs::read(path).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        GgufFile::from_bytes(bytes)
    }

    /// Parses a GGUF file held in memory.
    ///
    /// # Errors
    /// [`GgufError::BadMagic`], [`GgufError::UnsupportedVersion`], or
    /// [`GgufError::Malformed`] for anything truncated, out of range or inconsistent
    /// (tensor data outside the file, overlapping counts, bad alignment).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let mut c = Cursor {
            buf: &bytes,
            pos: 0,
        };
        if c.take(4).map_err(|_| GgufError::BadMagic)? != b"GGUF" {
            return Err(GgufError::BadMagic);
        }
        let version = c.u32()?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        // A tensor entry takes at least 8 + 4 + 8 + 4 + 8 bytes, a metadata entry 8 + 4.
        let n_tensors = c.count(32)?;
        let n_kv = c.count(12)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let ty = c.u32()?;
            let value = c.value(ty, 0)?;
            metadata.insert(key, value);
        }
        let mut tensors = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()?;
            if n_dims > 4 {
                return Err(GgufError::Malformed(format!(
                    "tensor {name} has {n_dims} dimensions"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64()?);
            }
            let ggml_type = c.u32()?;
            let offset = c.u64()?;
            tensors.push(GgufTensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        let alignment = metadata
            .get("general.alignment")
            .and_then(GgufValue::as_u64)
            .unwrap_or(32);
        if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 20 {
            return Err(GgufError::Malformed(format!("alignment {alignment}")));
        }
        let align = alignment as usize;
        let data_start = c.pos.div_ceil(align).saturating_mul(align);
        let file = GgufFile {
            metadata,
            tensors,
            bytes,
            data_start,
        };
        // Check every tensor of a supported type lies inside the file; unsupported types are
        // reported when (and if) the caller asks for that tensor.
        for t in &file.tensors {
            if matches!(t.ggml_type, GGML_F32 | GGML_F16 | GGML_Q4_1 | GGML_Q8_0) {
                file.tensor_bytes(t)?;
            }
        }
        Ok(file)
    }

    /// All metadata, by key.
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// The tensor directory, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The directory entry of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A metadata value that must be a non-negative integer.
    ///
    /// # Errors
    /// [`GgufError::Metadata`] if absent or of another type.
    pub fn meta_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.metadata
            .get(key)
            .and_then(GgufValue::as_u64)
            .ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                expected: "an unsigned integer",
            })
    }

    /// A metadata value that must be a number.
    ///
    /// # Errors
    /// [`GgufError::Metadata`] if absent or of another type.
    pub fn meta_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.metadata
            .get(key)
            .and_then(GgufValue::as_f64)
            .ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                expected: "a number",
            })
    }

    /// A metadata value that must be a string.
    ///
    /// # Errors
    /// [`GgufError::Metadata`] if absent or of another type.
    pub fn meta_str(&self, key: &str) -> Result<&str, GgufError> {
        self.metadata
            .get(key)
            .and_then(GgufValue::as_str)
            .ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                expected: "a string",
            })
    }

    /// The raw bytes of a tensor's data, checked to lie inside the file.
    fn tensor_bytes(&self, t: &GgufTensorInfo) -> Result<&[u8], GgufError> {
        let n = t
            .numel()
            .ok_or_else(|| GgufError::Malformed(format!("tensor {} is too large", t.name)))?;
        let size = data_size(t.ggml_type, n).ok_or_else(|| {
            if matches!(t.ggml_type, GGML_Q4_1 | GGML_Q8_0) {
                GgufError::Malformed(format!(
                    "tensor {} has {n} elements, not a multiple of {QK}",
                    t.name
                ))
            } else {
                GgufError::UnsupportedType {
                    name: t.name.clone(),
                    ggml_type: t.ggml_type,
                }
            }
        })?;
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| o.checked_add(self.data_start));
        let range = start.and_then(|s| Some(s..s.checked_add(size)?));
        range
            .and_then(|r| self.bytes.get(r))
            .ok_or_else(|| GgufError::Malformed(format!("tensor {} lies outside the file", t.name)))
    }

    /// Tensor `name` dequantised to `f32`, in GGUF element order (`dims[0]` fastest), with
    /// its dimensions.
    ///
    /// # Errors
    /// [`GgufError::MissingTensor`], [`GgufError::UnsupportedType`], or
    /// [`GgufError::Malformed`] if its data lies outside the file.
    pub fn dequantize(&self, name: &str) -> Result<(Vec<f32>, Vec<u64>), GgufError> {
        let t = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor(name.into()))?;
        let data = self.tensor_bytes(t)?;
        let n = t.numel().unwrap_or(0);
        let mut out = Vec::with_capacity(n);
        match t.ggml_type {
            GGML_F32 => out.extend(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap_or([0; 4]))),
            ),
            GGML_F16 => out.extend((0..n).map(|i| f16_at(data, 2 * i))),
            GGML_Q4_1 => dequantize_q4_1(data, &mut out),
            GGML_Q8_0 => dequantize_q8_0(data, &mut out),
            other => {
                return Err(GgufError::UnsupportedType {
                    name: name.into(),
                    ggml_type: other,
                });
            }
        }
        Ok((out, t.dims.clone()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn q4_1_and_q8_0_blocks() {
        // d = 0.5, m = -1: weight j = 0.5·nibble − 1.
        let mut b = Vec::new();
        b.extend_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        b.extend_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut out = Vec::new();
        dequantize_q4_1(&b, &mut out);
        assert_eq!(out.len(), 32);
        assert_eq!(out[0], -1.0);
        assert_eq!(out[15], 6.5);
        assert_eq!(out[16], 6.5);
        assert_eq!(out[31], -1.0);
        let mut q = Vec::new();
        q.extend_from_slice(&f16::from_f32(0.25).to_bits().to_le_bytes());
        q.extend((0..32i8).map(|j| (j - 16) as u8));
        let mut out = Vec::new();
        dequantize_q8_0(&q, &mut out);
        assert_eq!(out[0], -4.0);
        assert_eq!(out[31], 3.75);
    }
}
