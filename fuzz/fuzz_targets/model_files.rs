//! Checkpoint and configuration loading: a `config.json` text and a `model.safetensors`
//! file, both from the input (a two-byte length splits them).
//!
//! Checked: no panic and no allocation the file does not back (libFuzzer's -rss_limit_mb
//! catches one); weights that load match the configuration's shapes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use puma_layers::gpt2::weights::Gpt2Weights;
use puma_layers::gpt2::config::Gpt2Config;

fuzz_target!(|data: &[u8]| {
    let Some((n, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let n = usize::from(u16::from_le_bytes(*n)).min(rest.len());
    let (config, weights) = rest.split_at(n);
    let Ok(text) = std::str::from_utf8(config) else {
        return;
    };
    let Ok(config) = Gpt2Config::from_json_str(text) else {
        return;
    };
    if let Ok(w) = Gpt2Weights::from_safetensors_bytes(weights, &config) {
        w.check_shapes(&config).unwrap();
    }
});
