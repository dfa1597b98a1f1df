//! The C and Python examples, built and run against the library this test run built:
//! the C programs with the system C compiler (and again under valgrind), the Python ones
//! with ctypes. Each checks its secure results against a plaintext computation (or prints
//! generated ids that the test checks against the plaintext model). Also from C: misuse
//! (`tests/c/misuse.c`, under valgrind), parties on threads with delayed, queued frames
//! (`tests/c/async_parties.c`) and the struct layouts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `name` as cargo built it for this test run: next to this test binary in `deps/`
/// (cdylib and staticlib artifacts carry no hash), or one level up.
pub(crate) fn built_library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join(name), deps.join("..").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found next to {}", exe.display()))
}

pub(crate) fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn tool(name: &str) -> Command {
    let c = Command::new(name);
    // A clear message instead of "No such file" from spawn.
    if Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        panic!("`{name}` is not installed: run scripts/ffi-deps.sh");
    }
    c
}

/// Compiles the C program `src` (relative to the repository) against the static library.
fn build_c(src: &str, dir: &Path) -> PathBuf {
    build_c_with(src, dir, &[])
}

/// [`build_c`] of a program that uses threads.
fn build_c_threads(src: &str, dir: &Path) -> PathBuf {
    build_c_with(src, dir, &["-pthread"])
}

fn build_c_with(src: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = dir.join(Path::new(src).file_stem().unwrap());
    let out = tool(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(flags)
        .arg("-I")
        .arg(repo().join("ffi/include"))
        .arg(repo().join(src))
        .arg(built_library("libpuma_ffi.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "C compilation failed: {}", show(&out));
    exe
}

#[test]
fn c_example_runs_and_is_clean_under_valgrind() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c("examples/c/three_parties.c", dir.path());

    let out = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "C example failed: {}", show(&out));
    assert!(stdout.lines().any(|l| l == "ok"), "{}", show(&out));
    assert!(stdout.contains("max |error|: matmul"), "{}", show(&out));

    valgrind_clean(&exe);
}

/// valgrind, set to fail (exit code 99) on any invalid access, use of uninitialised
/// memory, or anything definitely, indirectly or possibly lost at exit.
fn valgrind() -> Command {
    let mut c = tool("valgrind");
    c.args([
        "--error-exitcode=99",
        "--leak-check=full",
        "--show-leak-kinds=definite,indirect,possible",
        "--errors-for-leak-kinds=definite,indirect,possible",
    ]);
    c
}

/// Runs `valgrind` (with its program): it must be clean and the program must print "ok".
fn valgrind_clean_output(mut valgrind: Command) -> Output {
    let out = valgrind.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "valgrind reported errors: {}",
        show(&out)
    );
    assert!(
        stderr.contains("ERROR SUMMARY: 0 errors"),
        "valgrind summary missing: {}",
        show(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == "ok")
    );
    out
}

/// Runs `exe` under valgrind: clean, and the program prints "ok".
fn valgrind_clean(exe: &Path) {
    let mut v = valgrind();
    v.arg(exe);
    valgrind_clean_output(v);
}

#[test]
fn c_misuse_returns_documented_statuses_under_valgrind() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c("ffi/tests/c/misuse.c", dir.path());
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "misuse checks failed: {}", show(&out));
    valgrind_clean(&exe);
}

#[test]
fn python_example_runs() {
    let out = tool("python3")
        .arg(repo().join("examples/python/three_parties.py"))
        .env("PUMA_FFI_LIB", built_library("libpuma_ffi.so"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Python example failed: {}",
        show(&out)
    );
    assert!(stdout.lines().any(|l| l == "ok"), "{}", show(&out));
    assert!(stdout.contains("max |error|: matmul"), "{}", show(&out));
}

#[test]
fn c_sees_the_rust_layouts() {
    use puma_ffi::{puma_event, puma_gpt2_config, puma_stats, puma_status};
    use std::mem::{offset_of, size_of};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include "puma.h"
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu %zu\n", sizeof(puma_status), sizeof(puma_event),
         offsetof(puma_event, peer), offsetof(puma_event, frame_len), sizeof(puma_stats),
         offsetof(puma_stats, bytes_received), offsetof(puma_stats, setup_bytes_sent),
         sizeof(puma_gpt2_config));
  return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = tool(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(repo().join("ffi/include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = Command::new(&exe).output().unwrap();
    let expected = format!(
        "{} {} {} {} {} {} {} {}\n",
        size_of::<puma_status>(),
        size_of::<puma_event>(),
        offset_of!(puma_event, peer),
        offset_of!(puma_event, frame_len),
        size_of::<puma_stats>(),
        offset_of!(puma_stats, bytes_received),
        offset_of!(puma_stats, setup_bytes_sent),
        size_of::<puma_gpt2_config>(),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

/// The prompt of the generations below, "Hello world" (GPT-2 ids).
const PROMPT: [u32; 2] = [15496, 995];

/// Greedy ids of the plaintext model in `models/<name>` after [`PROMPT`].
fn plain_ids(name: &str, max_new: usize) -> Vec<u32> {
    let plain =
        puma_layers::gpt2::plain::PlainGpt2::load(&repo().join("models").join(name)).unwrap();
    plain.generate_greedy(&PROMPT, max_new).unwrap()
}

/// The C API under an asynchronous host (`tests/c/async_parties.c`): a thread per party,
/// a queue per inbox, random 0-2 ms delays per frame and no barrier between operations;
/// 200 mixed operations checked in C against plain doubles, then a GPT-2 generation in the
/// same session (output mode by seed), whose ids must be the plaintext model's. 20 runs,
/// ten at a time (the runs mostly sleep).
#[test]
fn c_parties_on_threads_with_random_delays_run_200_operations_and_generate() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_threads("ffi/tests/c/async_parties.c", dir.path());
    let model = repo().join("models/gpt2-tiny-random");
    let want: Vec<String> = plain_ids("gpt2-tiny-random", 3)
        .iter()
        .map(u32::to_string)
        .collect();
    let want = format!("ids: {}", want.join(" "));
    for batch in (1..=20u64).collect::<Vec<_>>().chunks(10) {
        let children: Vec<_> = batch
            .iter()
            .map(|seed| {
                Command::new(&exe)
                    .arg(seed.to_string())
                    .arg(&model)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (seed, child) in batch.iter().zip(children) {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "seed {seed}: {}", show(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.lines().any(|l| l == want),
                "seed {seed}: want {want:?}: {}",
                show(&out)
            );
            assert!(stdout.lines().any(|l| l == "ok"), "{}", show(&out));
        }
    }
}

/// The prompt of the text examples, and the plaintext Shakespeare model's greedy ids after
/// it.
pub(crate) fn shakespeare(max_new: usize) -> (Vec<u32>, Vec<u32>) {
    let tokenizer =
        puma_layers::Tokenizer::from_dir(&repo().join("models/gpt2-shakespeare")).unwrap();
    let prompt = tokenizer.encode("ROMEO:").unwrap();
    // As the examples' docs say.
    assert_eq!(prompt, [33676, 4720, 25]);
    let plain =
        puma_layers::gpt2::plain::PlainGpt2::load(&repo().join("models/gpt2-shakespeare")).unwrap();
    let want = plain.generate_greedy(&prompt, max_new).unwrap();
    println!("ROMEO:{:?}", tokenizer.decode(&want).unwrap_or_default());
    (prompt, want)
}

pub(crate) fn ids_line(ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("ids: {}", ids.join(" "))
}

/// `examples/c/generate.c`: text generation with the embedded Shakespeare GPT-2 through
/// the C API gives the plaintext model's ids, streamed one by one to the client's token
/// callback; its sampled run ends where its rules say. Under valgrind it runs small: the tiny
/// model, a one-token prompt and two tokens (valgrind is some 50 times slower).
#[test]
fn c_generation_example_matches_the_plaintext_model_and_is_clean_under_valgrind() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c("examples/c/generate.c", dir.path());
    let (prompt, want) = shakespeare(6);
    let args: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let out = Command::new(&exe)
        .arg(repo().join("models/gpt2-shakespeare"))
        .arg("6")
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "C example failed: {}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == ids_line(&want)),
        "want {want:?}: {}",
        show(&out)
    );
    // The token callback printed each id as it came, in order, before the whole list.
    let tokens: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("token "))
        .map(str::to_owned)
        .collect();
    let want_tokens: Vec<String> = want
        .iter()
        .enumerate()
        .map(|(k, id)| format!("token {k}: {id}"))
        .collect();
    assert_eq!(tokens, want_tokens, "{}", show(&out));
    assert!(
        stdout.lines().any(|l| l == "finish: length"),
        "{}",
        show(&out)
    );
    // The sampled run ends at the length, the end-of-sequence id or the stop test (after
    // a newline token, 198), and says which.
    let sampled: Vec<u32> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sampled:"))
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let finish = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sampled finish: "))
        .unwrap();
    let last = *sampled.last().unwrap();
    match finish {
        "length" => assert_eq!(sampled.len(), 6),
        "eos" => assert_eq!(last, 50256),
        "stop" => assert_eq!(last, 198),
        other => panic!("finish {other}: {}", show(&out)),
    }
    assert!(!sampled[..sampled.len() - 1].contains(&198), "{sampled:?}");

    let tiny = repo().join("models/gpt2-tiny-random");
    let plain = puma_layers::gpt2::plain::PlainGpt2::load(&tiny).unwrap();
    // One token under valgrind: the C API's calls, callbacks and frees are the same for
    // every step. The sampled run draws at the temperature alone: the C side (options,
    // end-of-sequence rule, stop callback) is the same, and the top-k and top-p filters
    // over the vocabulary cost valgrind about 55 s on two cores (19 s for the greedy run,
    // 18 s for the temperature-only draw).
    let want = plain.generate_greedy(&PROMPT[..1], 1).unwrap();
    let mut valgrind = valgrind();
    valgrind
        .arg(&exe)
        .arg("--temperature-only")
        .arg(&tiny)
        .arg("1")
        .arg(PROMPT[0].to_string());
    let out = valgrind_clean_output(valgrind);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == ids_line(&want)),
        "{}",
        show(&out)
    );
}

/// `examples/python/generate.py`: text generation with the embedded Shakespeare GPT-2
/// from Python (ctypes) gives the plaintext model's ids, streamed to its token callback.
#[test]
fn python_generation_example_matches_the_plaintext_model() {
    let (prompt, want) = shakespeare(4);
    let out = tool("python3")
        .arg(repo().join("examples/python/generate.py"))
        .arg(repo().join("models/gpt2-shakespeare"))
        .arg("4")
        .args(prompt.iter().map(u32::to_string))
        .env("PUMA_FFI_LIB", built_library("libpuma_ffi.so"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Python example failed: {}",
        show(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == ids_line(&want)),
        "{}",
        show(&out)
    );
    // The client's token callback printed each id as it came, in order.
    let tokens: Vec<&str> = stdout.lines().filter(|l| l.starts_with("token ")).collect();
    let want_tokens: Vec<String> = want
        .iter()
        .enumerate()
        .map(|(k, id)| format!("token {k}: {id}"))
        .collect();
    assert_eq!(tokens, want_tokens, "{}", show(&out));
    assert!(
        stdout.lines().any(|l| l == "finish: length"),
        "{}",
        show(&out)
    );
    assert!(stdout.lines().any(|l| l == "ok"), "{}", show(&out));
}
