#!/usr/bin/env python3
"""Secure text generation through the puma-rs C API, from Python with ctypes.

P1 owns a GPT-2 checkpoint (by default the Shakespeare model shipped in
models/gpt2-shakespeare), P0 is the client with a prompt, and the three parties generate
tokens greedily with the secret-shared KV cache, all in one session: one key setup, one
model share, one generation. P0 learns the last position's logits at each step
(reveal-logits mode) and picks the next id; the other parties learn nothing. The client's
token callback prints each id as it is learned ("token K: ID"); the generation's options
(puma_generate_options) also take a temperature, top-k / top-p / min-p filters,
end-of-sequence ids and a stop test (see examples/c/generate.c). Frames polled from one
session are handed at once to the session they are addressed to.

The prompt is given as GPT-2 token ids (the tokenizer stays on the Rust side, e.g.
`puma_layers::Gpt2Tokenizer`); "ROMEO:" is 33676 4720 25.

Run (from the repository root, after `cargo build -p puma-ffi`):
    PUMA_FFI_LIB=target/debug/libpuma_ffi.so python3 examples/python/generate.py \\
        models/gpt2-shakespeare 4 33676 4720 25
Prints the generated ids ("ids: ..."), the finish reason and "ok".
"""

import ctypes as C
import os
import sys

from puma import (
    FINISH_NAMES,
    PUMA_EVENT_CLOSED,
    PUMA_EVENT_DONE,
    PUMA_EVENT_PENDING,
    PUMA_EVENT_TRANSMIT,
    PUMA_MAX_FRAME_LEN,
    PUMA_OUTPUT_REVEAL_LOGITS,
    TOKEN_FN,
    Event,
    GenerateOptions,
    PumaError,
    check,
    load,
)


class ModelInfo(C.Structure):
    _fields_ = [
        ("architecture", C.c_uint32),
        ("n_layer", C.c_size_t),
        ("d_model", C.c_size_t),
        ("max_positions", C.c_size_t),
        ("vocab_size", C.c_size_t),
    ]


def load_generation(path):
    p, sz, u32, u64 = C.c_void_p, C.c_size_t, C.c_uint32, C.c_uint64
    return load(
        path,
        {
            "puma_session_new": [u32, u64, C.c_char_p, sz, C.POINTER(p)],
            "puma_session_free": [p],
            "puma_session_close": [p],
            "puma_session_poll": [p, C.c_void_p, sz, C.POINTER(Event)],
            "puma_session_handle_frame": [p, u32, C.c_void_p, sz],
            "puma_session_start_model_share": [p, u32, C.c_char_p],
            "puma_session_take_model": [p, C.POINTER(p)],
            "puma_generate_options_init": [C.POINTER(GenerateOptions)],
            "puma_session_start_generate_with": [
                p, p, u32, C.POINTER(u32), sz, C.POINTER(GenerateOptions)
            ],
            "puma_session_result_finish": [p, C.POINTER(u32)],
            "puma_session_take_ids": [p, C.POINTER(u32), sz, C.POINTER(sz)],
            "puma_model_get_info": [p, C.POINTER(ModelInfo)],
            "puma_model_free": [p],
        },
    )


def run(lib, sessions, buf, until=PUMA_EVENT_DONE):
    """Drives what every session has just started (or its close) until all are done."""
    done = [False] * 3
    ev = Event()
    while not all(done):
        progress = False
        for i, s in enumerate(sessions):
            while not done[i]:
                check(lib, lib.puma_session_poll(s, buf, len(buf), C.byref(ev)), f"P{i} poll")
                if ev.kind == PUMA_EVENT_TRANSMIT:
                    st = lib.puma_session_handle_frame(sessions[ev.peer], i, buf, ev.frame_len)
                    check(lib, st, f"P{ev.peer} handle_frame")
                    progress = True
                elif ev.kind == PUMA_EVENT_PENDING:
                    break
                elif ev.kind == until:
                    done[i] = True
                    progress = True
        if not progress:
            raise PumaError("no party can make progress")


def main():
    if len(sys.argv) < 4:
        print(f"usage: {sys.argv[0]} MODEL_DIR MAX_NEW PROMPT_ID...", file=sys.stderr)
        return 2
    model_dir, max_new = sys.argv[1], int(sys.argv[2])
    prompt = [int(a) for a in sys.argv[3:]]
    lib = load_generation(os.environ.get("PUMA_FFI_LIB", "target/debug/libpuma_ffi.so"))
    buf = (C.c_uint8 * PUMA_MAX_FRAME_LEN)()

    sessions = []
    for i in range(3):
        s = C.c_void_p()
        entropy = os.urandom(32)  # fresh at every party
        check(lib, lib.puma_session_new(i, 2027, entropy, 32, C.byref(s)), "session_new")
        sessions.append(s)

    # P1 shares the model: it reads the checkpoint, the others its public config.json.
    config = os.path.join(model_dir, "config.json")
    for i, s in enumerate(sessions):
        path = (model_dir if i == 1 else config).encode()
        check(lib, lib.puma_session_start_model_share(s, 1, path), "start_model_share")
    run(lib, sessions, buf)
    models = []
    for s in sessions:
        m = C.c_void_p()
        check(lib, lib.puma_session_take_model(s, C.byref(m)), "take_model")
        models.append(m)
    info = ModelInfo()
    check(lib, lib.puma_model_get_info(models[0], C.byref(info)), "model_get_info")
    print(f"model: {info.n_layer} layers, width {info.d_model}, vocabulary {info.vocab_size}")

    # P0 generates: the others pass no prompt, only its (public) length, and the same
    # options (only the client's callback is called).
    ids_in = (C.c_uint32 * len(prompt))(*prompt)
    opts = GenerateOptions()
    check(lib, lib.puma_generate_options_init(C.byref(opts)), "generate_options_init")
    opts.max_new = max_new
    opts.mode = PUMA_OUTPUT_REVEAL_LOGITS

    def on_token(_user_data, step, token):
        print(f"token {step}: {token}", flush=True)

    opts.on_token = TOKEN_FN(on_token)  # kept alive by `opts` until the end
    for i, (s, m) in enumerate(zip(sessions, models)):
        ids = ids_in if i == 0 else None
        st = lib.puma_session_start_generate_with(s, m, 0, ids, len(prompt), C.byref(opts))
        check(lib, st, "start_generate_with")
    run(lib, sessions, buf)
    finish = C.c_uint32()
    check(lib, lib.puma_session_result_finish(sessions[0], C.byref(finish)), "result_finish")
    out = (C.c_uint32 * max_new)()
    generated = []
    for i, s in enumerate(sessions):
        written = C.c_size_t()
        st = lib.puma_session_take_ids(s, out, max_new, C.byref(written))
        check(lib, st, "take_ids")
        if written.value != (max_new if i == 0 else 0):
            raise PumaError(f"P{i} got {written.value} ids")
        if i == 0:
            generated = list(out)
    print("ids: " + " ".join(str(i) for i in generated))
    print(f"finish: {FINISH_NAMES[finish.value]}")

    # A clean end: every party closes and sends its last frames.
    for s in sessions:
        check(lib, lib.puma_session_close(s), "close")
    run(lib, sessions, buf, until=PUMA_EVENT_CLOSED)
    for m in models:
        check(lib, lib.puma_model_free(m), "model_free")
    for s in sessions:
        check(lib, lib.puma_session_free(s), "session_free")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
