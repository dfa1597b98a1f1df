//! Secure BERT / RoBERTa inference: sentence embeddings or classification with three
//! parties on three threads in one process.
//!
//! The client (P0) holds the sentences and alone learns the result; the model owner (P1)
//! holds the weights; P2 helps. Sentence lengths are public, everything else is computed
//! on 2-out-of-3 replicated secret shares.
//!
//! ```sh
//! bash scripts/fetch-minilm.sh     # all-MiniLM-L6-v2 into target/models/minilm-l6
//! cargo run --release -p puma-examples --bin bert -- --compare-plaintext
//! cargo run --release -p puma-examples --bin bert -- --sentence "A man is eating food." \
//!     --sentence "A man is eating a piece of bread." --json
//! cargo run --release -p puma-examples --bin bert -- --model models/bert-tiny-random --task classify
//! cargo run --release -p puma-examples --bin bert -- --synthetic bert-large --layers 2 --tokens 128
//! ```
//!
//! `--synthetic bert-base|bert-large [--layers L]` runs a published shape with seeded
//! random weights, for cost measurements (`--synthetic-base L` is the older spelling of
//! `--synthetic bert-base --layers L`); the `bench_models` binary scales such runs to the
//! whole model.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{CommandFactory, Parser, ValueEnum};
use puma_core::proto::{ExpApprox, GeluFit};
use puma_layers::bert::BertBatch;
use puma_layers::bert::secure::Outputs;
use puma_layers::nn::{GeluApprox, LayerCosts, SecureSettings};
use puma_layers::{Tokenizer, TokenizerError};
use puma_runner::bert::{
    BERT_BASE, BERT_LARGE, BertReport, BertShape, LoadedBert, MINILM_DIR, PlainComparison,
    compare_plain, cosines, load_model, run_secure_observed, synthetic_ids, synthetic_model,
};
use puma_runner::diagnostics::error_chain as chain;
use puma_runner::streaming::LiveView;
use serde_json::{Value, json};

/// What the client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Task {
    /// Mean-pooled, L2-normalised sentence embeddings and their cosine matrix.
    Embed,
    /// The classification logits (and pooled output) of a model with a head.
    Classify,
}

/// The GeLU approximation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Gelu {
    /// The precise protocol (max error ≤ 1.3e-4).
    Precise,
    /// PUMA's piecewise shape refitted (max error 1.75e-3).
    Minimax,
    /// PUMA's piecewise polynomial (max error 0.0199).
    Puma,
}

/// A published shape for a synthetic model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Synthetic {
    /// Bert-Base: 12 layers, width 768, 12 heads, MLP 3072.
    BertBase,
    /// Bert-Large: 24 layers, width 1024, 16 heads, MLP 4096.
    BertLarge,
}

impl Synthetic {
    fn shape(self) -> BertShape {
        match self {
            Synthetic::BertBase => BERT_BASE,
            Synthetic::BertLarge => BERT_LARGE,
        }
    }
}

/// Secure three-party BERT / RoBERTa (PUMA-style replicated secret sharing).
#[derive(Debug, Parser)]
#[command(name = "bert", version)]
struct Args {
    /// A Hugging Face BERT / RoBERTa directory (config.json, model.safetensors, and its
    /// tokenizer: tokenizer.json, vocab.txt, or RoBERTa's vocab.json + merges.txt); default: all-MiniLM-L6-v2 in target/models/minilm-l6
    /// (`bash scripts/fetch-minilm.sh`).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["synthetic_base", "synthetic"])]
    model: Option<PathBuf>,
    /// A sentence (repeat for a batch; they are right-padded to the longest).
    #[arg(long = "sentence", value_name = "TEXT")]
    sentences: Vec<String>,
    /// Token ids of one sequence instead of text, comma-separated (repeatable).
    #[arg(long = "ids", value_name = "ID,ID,...", conflicts_with = "sentences")]
    ids: Vec<String>,
    /// What the client learns.
    #[arg(long, value_enum, default_value_t = Task::Embed)]
    task: Task,
    /// Softmax's exponential as the second-order base with this many squarings (4..=12;
    /// 2 rounds each) instead of the default minimax polynomial (11 rounds).
    #[arg(long, value_parser = clap::value_parser!(u32).range(4..=12))]
    softmax_squarings: Option<u32>,
    /// The GeLU approximation.
    #[arg(long, value_enum, default_value_t = Gelu::Precise)]
    gelu: Gelu,
    /// Instead of a checkpoint, a model of this published shape (vocabulary 30522) with
    /// seeded random weights: for cost measurements.
    #[arg(
        long,
        value_enum,
        value_name = "SHAPE",
        conflicts_with = "synthetic_base"
    )]
    synthetic: Option<Synthetic>,
    /// Layers of the synthetic model (default: the shape's own count).
    #[arg(long, value_name = "LAYERS", requires = "synthetic",
          value_parser = clap::value_parser!(u64).range(1..=24))]
    layers: Option<u64>,
    /// The same as `--synthetic bert-base --layers LAYERS`.
    #[arg(long, value_name = "LAYERS", value_parser = clap::value_parser!(u64).range(1..=24))]
    synthetic_base: Option<u64>,
    /// Sequence length of the synthetic model's single input.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(2..=512))]
    tokens: u64,
    /// Also run the plaintext f64 model and print the errors of the secure outputs.
    #[arg(long)]
    compare_plaintext: bool,
    /// Print one JSON object on stdout instead of the human-readable report.
    #[arg(long)]
    json: bool,
    /// Session id and seed of the parties' entropy (demo only: real parties use the OS).
    #[arg(long, default_value_t = 2024)]
    seed: u64,
}

const DEFAULT_SENTENCES: [&str; 3] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
];

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let msg = e.to_string();
            eprint!("{msg}");
            if !msg.contains("Usage:") {
                eprintln!("\n{}", Args::command().render_usage());
            }
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let t_load = Instant::now();
    let synthetic = match (args.synthetic, args.synthetic_base) {
        (Some(s), _) => Some((s.shape(), args.layers)),
        (None, Some(layers)) => Some((BERT_BASE, Some(layers))),
        (None, None) => None,
    };
    let (model, model_name, texts, batch) = match synthetic {
        Some((shape, layers)) => {
            let layers = match layers {
                Some(l) => usize::try_from(l).map_err(|_| "too many layers")?,
                None => shape.layers,
            };
            let model = synthetic_model(shape.config(layers), 2, args.seed);
            let n = usize::try_from(args.tokens).map_err(|_| "--tokens is too large")?;
            (
                model,
                format!("synthetic {} shape, {layers} layers", shape.name),
                Vec::new(),
                BertBatch::single(&synthetic_ids(n)),
            )
        }
        None => {
            let dir = args
                .model
                .clone()
                .unwrap_or_else(|| PathBuf::from(MINILM_DIR));
            let model = load_model(&dir).map_err(|e| chain(&e))?;
            let name = dir
                .canonicalize()
                .unwrap_or_else(|_| dir.clone())
                .display()
                .to_string();
            let (texts, seqs) = if args.ids.is_empty() {
                let tok = Tokenizer::from_dir(&dir).map_err(|e| chain(&e))?;
                let texts: Vec<String> = if args.sentences.is_empty() {
                    DEFAULT_SENTENCES.iter().map(|s| (*s).to_owned()).collect()
                } else {
                    args.sentences.clone()
                };
                let seqs = texts
                    .iter()
                    .map(|t| {
                        let ids = tok.encode(t)?;
                        let types = vec![0; ids.len()];
                        Ok((ids, types))
                    })
                    .collect::<Result<Vec<_>, TokenizerError>>()
                    .map_err(|e| chain(&e))?;
                (texts, seqs)
            } else {
                let mut seqs = Vec::with_capacity(args.ids.len());
                for list in &args.ids {
                    let ids = list
                        .split(',')
                        .map(|t| t.trim().parse::<u32>())
                        .collect::<Result<Vec<u32>, _>>()
                        .map_err(|_| {
                            format!("--ids {list:?}: expected comma-separated token ids")
                        })?;
                    let types = vec![0; ids.len()];
                    seqs.push((ids, types));
                }
                (Vec::new(), seqs)
            };
            let batch = BertBatch::padded(&seqs, 0).map_err(|e| chain(&e))?;
            (model, name, texts, batch)
        }
    };
    batch.check(&model.config).map_err(|e| chain(&e))?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let outputs = match args.task {
        Task::Embed => Outputs {
            embeddings: true,
            ..Outputs::default()
        },
        Task::Classify => Outputs {
            pooled: true,
            logits: true,
            ..Outputs::default()
        },
    };
    let settings = SecureSettings {
        softmax_exp: match args.softmax_squarings {
            Some(squarings) => ExpApprox::Taylor2 { squarings },
            None => ExpApprox::Minimax,
        },
        gelu: match args.gelu {
            Gelu::Precise => GeluApprox::Precise,
            Gelu::Minimax => GeluApprox::Piecewise(GeluFit::MINIMAX),
            Gelu::Puma => GeluApprox::Piecewise(GeluFit::PUMA),
        },
        ..SecureSettings::default()
    };
    let cfg = &model.config;
    if !args.json {
        println!(
            "model: {model_name} ({} layers, width {}, {} heads, vocabulary {}, {} labels), loaded in {load_secs:.2} s",
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.vocab_size,
            model.weights.num_labels()
        );
        println!(
            "batch: {} sequence(s) padded to {} tokens; 3 parties in memory: P0 client, P1 model owner, P2 helper",
            batch.batch, batch.seq_len
        );
    }
    // A bar while the model is shared and the encoder runs, layer by layer.
    let layers = model.config.num_hidden_layers;
    let view = Arc::new(LiveView::new(
        layers,
        1,
        !args.json && std::io::stderr().is_terminal(),
        None,
    ));
    let result = run_secure_observed(
        &model,
        &batch,
        outputs,
        settings,
        args.seed,
        Some(view.share_observer()),
        Some(view.layer_observer(layers)),
    );
    view.finish();
    let report = result.map_err(|e| chain(&e))?;
    let comparison = if args.compare_plaintext {
        Some(compare_plain(&model, &batch, &report.client).map_err(|e| chain(&e))?)
    } else {
        None
    };
    if args.json {
        println!(
            "{}",
            to_json(
                &model,
                &model_name,
                &texts,
                &batch,
                &report,
                comparison.as_ref(),
                args
            )
        );
    } else {
        print_summary(&model, &texts, &report, comparison.as_ref());
    }
    Ok(())
}

fn costs_json(c: &LayerCosts) -> Value {
    Value::Array(
        c.entries
            .iter()
            .map(|(k, b, e)| json!({"kind": k.name(), "bytes": b, "rounds": e}))
            .collect(),
    )
}

fn to_json(
    model: &LoadedBert,
    name: &str,
    texts: &[String],
    batch: &BertBatch,
    r: &BertReport,
    cmp: Option<&PlainComparison>,
    args: &Args,
) -> Value {
    let d = model.config.hidden_size;
    let rows = |v: &Option<Vec<f64>>, w: usize| -> Value {
        v.as_ref().map_or(Value::Null, |v| {
            Value::Array(v.chunks(w.max(1)).map(|c| json!(c)).collect())
        })
    };
    let labels = model.weights.num_labels();
    let ids: Vec<Vec<u32>> = (0..batch.batch)
        .map(|b| {
            batch.input_ids[b * batch.seq_len..(b + 1) * batch.seq_len]
                .iter()
                .zip(batch.mask_row(b))
                .filter(|(_, m)| **m)
                .map(|(i, _)| *i)
                .collect()
        })
        .collect();
    let cosine = r.client.embeddings.as_ref().map(|e| {
        let m = cosines(e, d);
        Value::Array(
            m.rows()
                .into_iter()
                .map(|row| json!(row.to_vec()))
                .collect(),
        )
    });
    json!({
        "model": name,
        "config": {
            "layers": model.config.num_hidden_layers,
            "hidden": d,
            "heads": model.config.num_attention_heads,
            "intermediate": model.config.intermediate_size,
            "labels": labels,
        },
        "task": match args.task { Task::Embed => "embed", Task::Classify => "classify" },
        "sentences": texts,
        "ids": ids,
        "embeddings": rows(&r.client.embeddings, d),
        "cosine": cosine,
        "logits": rows(&r.client.logits, labels),
        "pooled": rows(&r.client.pooled, d),
        "plaintext": cmp.map(|c| json!({
            "embeddings": Value::Array(c.embeddings.rows().into_iter().map(|r| json!(r.to_vec())).collect()),
            "logits": c.logits.as_ref().map(|l| Value::Array(l.rows().into_iter().map(|r| json!(r.to_vec())).collect())),
            "embedding_max_abs_error": c.embedding_max_abs,
            "embedding_min_cosine": c.embedding_min_cosine,
            "logits_max_abs_error": c.logits_max_abs,
            "pooled_max_abs_error": c.pooled_max_abs,
        })),
        "seconds": r.elapsed.as_secs_f64(),
        "share_seconds": r.share_time.as_secs_f64(),
        "rounds": r.rounds(),
        "bytes_per_party": r.payload_bytes(),
        "share_model_bytes_per_party": r.share_model.map(|s| s.0),
        "costs_per_party": [costs_json(&r.client.costs), costs_json(&r.others[0]), costs_json(&r.others[1])],
        "settings": {
            "softmax_exp": match args.softmax_squarings {
                Some(t) => format!("taylor2 t={t}"),
                None => "minimax".to_owned(),
            },
            "gelu": format!("{:?}", args.gelu).to_lowercase(),
        },
    })
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

fn print_summary(
    model: &LoadedBert,
    texts: &[String],
    r: &BertReport,
    cmp: Option<&PlainComparison>,
) {
    let d = model.config.hidden_size;
    if let Some(e) = &r.client.embeddings {
        println!("sentence embeddings (first 4 of {d} values):");
        for (i, row) in e.chunks(d.max(1)).enumerate() {
            let head: Vec<String> = row.iter().take(4).map(|v| format!("{v:+.4}")).collect();
            let label = texts
                .get(i)
                .map_or_else(|| format!("#{i}"), |t| format!("{t:?}"));
            println!("  {label}: [{} …]", head.join(", "));
        }
        let m = cosines(e, d);
        println!("cosine similarities:");
        for row in m.rows() {
            let cells: Vec<String> = row.iter().map(|v| format!("{v:+.4}")).collect();
            println!("  {}", cells.join(" "));
        }
    }
    if let Some(l) = &r.client.logits {
        let labels = model.weights.num_labels().max(1);
        println!("logits:");
        for (i, row) in l.chunks(labels).enumerate() {
            let cells: Vec<String> = row.iter().map(|v| format!("{v:+.6}")).collect();
            println!("  #{i}: [{}]", cells.join(", "));
        }
    }
    if let Some(c) = cmp {
        if let (Some(a), Some(cos)) = (c.embedding_max_abs, c.embedding_min_cosine) {
            println!("vs plaintext f64: embeddings max |err| {a:.2e}, min cosine {cos:.7}");
        }
        if let Some(a) = c.logits_max_abs {
            println!("vs plaintext f64: logits max |err| {a:.2e}");
        }
        if let Some(a) = c.pooled_max_abs {
            println!("vs plaintext f64: pooled output max |err| {a:.2e}");
        }
    }
    let bytes = r.payload_bytes();
    println!(
        "time {:.2} s (sharing the model {:.2} s); {} rounds; payload MB sent per party: {:.1} / {:.1} / {:.1} (total {:.1}; sharing the model {:.1} by the owner)",
        r.elapsed.as_secs_f64(),
        r.share_time.as_secs_f64(),
        r.rounds(),
        mb(bytes[0]),
        mb(bytes[1]),
        mb(bytes[2]),
        mb(bytes.iter().sum()),
        mb(r.share_model[1].0),
    );
    println!("per layer kind (MB sent by P0 / P1 / P2, rounds):");
    for &(k, b, e) in &r.client.costs.entries {
        let other = |o: &LayerCosts| o.get(k).map_or(0, |x| x.0);
        println!(
            "  {k:<22} {:>9.2} {:>9.2} {:>9.2}  {e:>5}",
            mb(b),
            mb(other(&r.others[0])),
            mb(other(&r.others[1]))
        );
    }
}
