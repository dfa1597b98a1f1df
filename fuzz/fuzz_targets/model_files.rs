//! Checkpoint and configuration loading: a `config.json` text and a `model.safetensors`
//! file, both from the input (a two-byte length splits them).
//!
//! Checked: no panic and no allocation the file does not back (libFuzzer's -rss_limit_mb
//! catches one); a configuration that parses is within the model size limits, as the
//! parties without the weights size their shares from it alone (`check_decoder`); weights
//! that load match the configuration's shapes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use puma_fuzz::check_decoder;
use puma_layers::gpt2::config::Gpt2Config;
use puma_layers::gpt2::weights::Gpt2Weights;

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
    check_decoder(&config);
    if let Ok(w) = Gpt2Weights::from_safetensors_bytes(weights, &config) {
        w.check_shapes(&config).unwrap();
    }
});
