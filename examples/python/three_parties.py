#!/usr/bin/env python3
"""Three parties in one process through the puma-rs C API, from Python with ctypes.

P0 secret-shares a 4x8 matrix X, P1 an 8x6 matrix W; the parties compute Y = X.W,
G = GeLU(Y) and S = softmax(G) (row-wise) on shares and reveal Y, G and S to P0, which
checks them against the same computation in plain Python floats. Frames polled from one
session are handed at once to the session they are addressed to.

Run (from the repository root, after `cargo build -p puma-ffi`):
    PUMA_FFI_LIB=target/debug/libpuma_ffi.so python3 examples/python/three_parties.py
Exit status 0 and "ok" on success.
"""

import ctypes as C
import math
import os
import random
import sys

M, K, N = 4, 8, 6

from puma import (
    PUMA_EVENT_PENDING,
    PUMA_EVENT_TRANSMIT,
    PUMA_EVENT_YIELDED,
    PUMA_GELU_PRECISE_ERF,
    PUMA_MAX_FRAME_LEN,
    Event,
    PumaError,
    check,
    load,
)


class Stats(C.Structure):
    _fields_ = [
        ("operations", C.c_uint64),
        ("rounds", C.c_uint64),
        ("frames_sent", C.c_uint64 * 3),
        ("bytes_sent", C.c_uint64 * 3),
        ("payload_bytes_sent", C.c_uint64 * 3),
        ("frames_received", C.c_uint64 * 3),
        ("bytes_received", C.c_uint64 * 3),
        ("setup_bytes_sent", C.c_uint64),
    ]


def load_operations(path):
    p, sz, u32, u64, dbl = C.c_void_p, C.c_size_t, C.c_uint32, C.c_uint64, C.c_double
    return load(
        path,
        {
            "puma_session_new": [u32, u64, C.c_char_p, sz, C.POINTER(p)],
            "puma_session_free": [p],
            "puma_session_poll": [p, C.c_void_p, sz, C.POINTER(Event)],
            "puma_session_handle_frame": [p, u32, C.c_void_p, sz],
            "puma_session_start_share": [p, u32, C.POINTER(dbl), sz, sz, sz],
            "puma_session_start_matmul": [p, p, p],
            "puma_session_start_gelu": [p, p, u32],
            "puma_session_start_softmax": [p, p],
            "puma_session_start_reveal": [p, p, u32],
            "puma_session_take_tensor": [p, C.POINTER(p)],
            "puma_session_take_values": [p, C.POINTER(dbl), sz, C.POINTER(sz)],
            "puma_session_stats": [p, C.POINTER(Stats)],
            "puma_tensor_free": [p],
        },
    )


def run_operation(lib, sessions, buf):
    """Drives the operation every session has just started until all are done."""
    done = [False] * 3
    ev = Event()
    while not all(done):
        progress = False
        for i, s in enumerate(sessions):
            # A party that is done is still polled: its peers may need the frames that
            # end its last epoch.
            while True:
                check(lib, lib.puma_session_poll(s, buf, len(buf), C.byref(ev)), f"P{i} poll")
                if ev.kind == PUMA_EVENT_TRANSMIT:
                    st = lib.puma_session_handle_frame(sessions[ev.peer], i, buf, ev.frame_len)
                    check(lib, st, f"P{ev.peer} handle_frame")
                    progress = True
                elif ev.kind == PUMA_EVENT_YIELDED:
                    continue
                elif ev.kind == PUMA_EVENT_PENDING:
                    break
                else:
                    progress = progress or not done[i]
                    done[i] = True
                    break
        if not progress:
            raise PumaError("no party can make progress")


def take_tensors(lib, sessions):
    out = []
    for s in sessions:
        t = C.c_void_p()
        check(lib, lib.puma_session_take_tensor(s, C.byref(t)), "take_tensor")
        out.append(t)
    return out


def reveal_to_p0(lib, sessions, tensors, n, buf):
    for s, t in zip(sessions, tensors):
        check(lib, lib.puma_session_start_reveal(s, t, 0), "start_reveal")
    run_operation(lib, sessions, buf)
    values = (C.c_double * n)()
    result = None
    for i, s in enumerate(sessions):
        written = C.c_size_t()
        check(lib, lib.puma_session_take_values(s, values, n, C.byref(written)), "take_values")
        if written.value != (n if i == 0 else 0):
            raise PumaError(f"P{i} got {written.value} values")
        if i == 0:
            result = list(values)
    return result


def plaintext(x, w):
    y = [[sum(x[r][k] * w[k][c] for k in range(K)) for c in range(N)] for r in range(M)]
    g = [[0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in row] for row in y]
    s = []
    for row in g:
        mx = max(row)
        e = [math.exp(v - mx) for v in row]
        s.append([v / sum(e) for v in e])
    flat = lambda a: [v for row in a for v in row]
    return flat(y), flat(g), flat(s)


def main():
    lib = load_operations(os.environ.get("PUMA_FFI_LIB", "target/debug/libpuma_ffi.so"))
    rng = random.Random(42)
    x = [[rng.uniform(-2, 2) for _ in range(K)] for _ in range(M)]
    w = [[rng.uniform(-2, 2) for _ in range(N)] for _ in range(K)]
    y_ref, g_ref, s_ref = plaintext(x, w)

    sessions = []
    for i in range(3):
        s = C.c_void_p()
        check(lib, lib.puma_session_new(i, 2024, os.urandom(32), 32, C.byref(s)), "session_new")
        sessions.append(s)
    buf = (C.c_uint8 * PUMA_MAX_FRAME_LEN)()
    tensors = []
    try:
        for owner, data, rows, cols in [(0, x, M, K), (1, w, K, N)]:
            flat = (C.c_double * (rows * cols))(*[v for row in data for v in row])
            for i, s in enumerate(sessions):
                vals = flat if i == owner else None
                st = lib.puma_session_start_share(s, owner, vals, rows * cols, rows, cols)
                check(lib, st, "start_share")
            run_operation(lib, sessions, buf)
            tensors.append(take_tensors(lib, sessions))
        tx, tw = tensors
        steps = [
            lambda s, i: lib.puma_session_start_matmul(s, tx[i], tw[i]),
            lambda s, i: lib.puma_session_start_gelu(s, tensors[-1][i], PUMA_GELU_PRECISE_ERF),
            lambda s, i: lib.puma_session_start_softmax(s, tensors[-1][i]),
        ]
        for start in steps:
            for i, s in enumerate(sessions):
                check(lib, start(s, i), "start")
            run_operation(lib, sessions, buf)
            tensors.append(take_tensors(lib, sessions))
        ty, tg, ts = tensors[2:]
        y = reveal_to_p0(lib, sessions, ty, M * N, buf)
        g = reveal_to_p0(lib, sessions, tg, M * N, buf)
        sm = reveal_to_p0(lib, sessions, ts, M * N, buf)
        err = lambda a, b: max(abs(u - v) for u, v in zip(a, b))
        ey, eg, es = err(y, y_ref), err(g, g_ref), err(sm, s_ref)
        print(f"max |error|: matmul {ey:.3g}, gelu {eg:.3g}, softmax {es:.3g}")
        for i, s in enumerate(sessions):
            st = Stats()
            check(lib, lib.puma_session_stats(s, C.byref(st)), "stats")
            print(f"P{i}: {st.operations} operations, {st.rounds} rounds, "
                  f"{sum(st.bytes_sent)} bytes sent")
    finally:
        for group in tensors:
            for t in group:
                lib.puma_tensor_free(t)
        for s in sessions:
            lib.puma_session_free(s)
    # Same bounds as the C example (fixed-point resolution 3.8e-6; precise GeLU <= 1.3e-4).
    if ey > 5e-5 or eg > 2e-4 or es > 1e-4:
        print("secure results differ from the plaintext ones", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
