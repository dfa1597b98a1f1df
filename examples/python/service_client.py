#!/usr/bin/env python3
"""A thin client of the secure inference service from Python, over the puma-rs C API.

Three `puma-serve` servers hold a model's shares; this client is outside them. It deals
its prompt (or its sentences' token ids) to the three servers, which compute on shares,
and reconstructs the result from their shares, checking that the servers agree. No
server learns the input or the result. The tokenizer stays with the caller (for example
Hugging Face's `tokenizers` package); this example takes token ids.

Run (from the repository root, after `cargo build -p puma-ffi` and with three servers
up, see README.md, "Running the secure inference service"):

    PUMA_FFI_LIB=target/debug/libpuma_ffi.so python3 examples/python/service_client.py \\
        svc/service.toml generate shakespeare 8 41 52 ...
    PUMA_FFI_LIB=target/debug/libpuma_ffi.so python3 examples/python/service_client.py \\
        svc/service.toml encode minilm 101,1037,2158,102 101,7592,102

`generate MODEL MAX_NEW ID...` prints each id as it arrives ("token K: ID"), then
"ids: ...". `encode MODEL IDS...` (one comma-separated sequence per argument, special
tokens included) prints each sequence's sentence embedding ("embedding S: v0 v1 ...").
Both print "ok" at the end; a failure prints the library's message and exits with 1.
"""

import ctypes as C
import os
import sys

from puma import (
    PUMA_ENCODE_EMBEDDINGS,
    PUMA_ERR_INSUFFICIENT_SIZE,
    PUMA_OUTPUT_SECURE_ARGMAX,
    TOKEN_FN,
    GenerateOptions,
    PumaError,
    check,
    load,
)


def load_service(path):
    p, sz, u32 = C.c_void_p, C.c_size_t, C.c_uint32
    return load(
        path,
        {
            "puma_service_client_new": [C.c_char_p, C.POINTER(p)],
            "puma_service_client_free": [p],
            "puma_generate_options_init": [C.POINTER(GenerateOptions)],
            "puma_service_generate": [
                p, C.c_char_p, C.POINTER(u32), sz, C.POINTER(GenerateOptions),
                C.POINTER(u32), sz, C.POINTER(sz),
            ],
            "puma_service_encode": [
                p, C.c_char_p, C.POINTER(u32), C.POINTER(u32), C.POINTER(sz), sz, u32,
                C.POINTER(C.c_double), sz, C.POINTER(sz),
            ],
        },
    )


def generate(lib, client, model, max_new, prompt):
    ids_in = (C.c_uint32 * len(prompt))(*prompt)
    opts = GenerateOptions()
    check(lib, lib.puma_generate_options_init(C.byref(opts)), "generate_options_init")
    opts.max_new = max_new
    opts.mode = PUMA_OUTPUT_SECURE_ARGMAX

    def on_token(_user_data, step, token):
        print(f"token {step}: {token}", flush=True)

    opts.on_token = TOKEN_FN(on_token)  # kept alive by `opts` until the end
    out = (C.c_uint32 * max_new)()
    written = C.c_size_t()
    st = lib.puma_service_generate(
        client, model.encode(), ids_in, len(prompt), C.byref(opts), out, max_new,
        C.byref(written),
    )
    check(lib, st, "service_generate")
    print("ids: " + " ".join(str(i) for i in out[: written.value]))


def encode(lib, client, model, sequences):
    flat = [i for s in sequences for i in s]
    ids = (C.c_uint32 * len(flat))(*flat)
    lens = (C.c_size_t * len(sequences))(*[len(s) for s in sequences])
    written = C.c_size_t()
    # Ask for the size first: a call with no room says how much it needs, sending nothing.
    st = lib.puma_service_encode(
        client, model.encode(), ids, None, lens, len(sequences), PUMA_ENCODE_EMBEDDINGS,
        None, 0, C.byref(written),
    )
    if st != PUMA_ERR_INSUFFICIENT_SIZE:
        check(lib, st, "service_encode (size)")
    need = written.value
    out = (C.c_double * need)()
    st = lib.puma_service_encode(
        client, model.encode(), ids, None, lens, len(sequences), PUMA_ENCODE_EMBEDDINGS,
        out, need, C.byref(written),
    )
    check(lib, st, "service_encode")
    width = written.value // len(sequences)
    for s in range(len(sequences)):
        row = out[s * width : (s + 1) * width]
        print(f"embedding {s}: " + " ".join(f"{v:.6f}" for v in row))


def main():
    if len(sys.argv) < 5 or sys.argv[2] not in ("generate", "encode"):
        print(
            f"usage: {sys.argv[0]} SERVICE_TOML generate MODEL MAX_NEW ID...\n"
            f"       {sys.argv[0]} SERVICE_TOML encode MODEL IDS[,IDS...]...",
            file=sys.stderr,
        )
        return 2
    config, command, model = sys.argv[1], sys.argv[2], sys.argv[3]
    lib = load_service(os.environ.get("PUMA_FFI_LIB", "target/debug/libpuma_ffi.so"))
    client = C.c_void_p()
    check(lib, lib.puma_service_client_new(config.encode(), C.byref(client)), "client_new")
    try:
        if command == "generate":
            prompt = [int(a) for a in sys.argv[5:]]
            generate(lib, client, model, int(sys.argv[4]), prompt)
        else:
            sequences = [[int(t) for t in a.split(",")] for a in sys.argv[4:]]
            encode(lib, client, model, sequences)
    finally:
        check(lib, lib.puma_service_client_free(client), "client_free")
    print("ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PumaError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
