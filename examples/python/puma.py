"""What the Python examples share of the puma-rs C API (ffi/include/puma.h) over ctypes:
its constants and structures, loading the library with the signatures a script uses,
and turning a failed call into an exception that carries the library's message."""

import ctypes as C

PUMA_OK = 0
PUMA_ERR_INSUFFICIENT_SIZE = 8
PUMA_EVENT_TRANSMIT, PUMA_EVENT_YIELDED, PUMA_EVENT_PENDING = 0, 1, 2
PUMA_EVENT_DONE, PUMA_EVENT_CLOSED = 3, 4
PUMA_MAX_FRAME_LEN = 4194304
PUMA_GELU_PRECISE_ERF = 2
PUMA_OUTPUT_REVEAL_LOGITS, PUMA_OUTPUT_SECURE_ARGMAX = 0, 1
PUMA_ENCODE_EMBEDDINGS = 8
FINISH_NAMES = ["length", "eos", "stop", "ended"]

# Callbacks of puma_generate_options: puma_stop_fn and puma_token_fn.
STOP_FN = C.CFUNCTYPE(C.c_int32, C.c_void_p, C.POINTER(C.c_uint32), C.c_size_t)
TOKEN_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_size_t, C.c_uint32)


class Event(C.Structure):
    _fields_ = [("kind", C.c_int), ("peer", C.c_uint32), ("frame_len", C.c_size_t)]


class GenerateOptions(C.Structure):
    _fields_ = [
        ("max_new", C.c_size_t),
        ("mode", C.c_uint32),
        ("flags", C.c_uint32),
        ("temperature", C.c_double),
        ("top_k", C.c_size_t),
        ("top_p", C.c_double),
        ("min_p", C.c_double),
        ("eos_ids", C.POINTER(C.c_uint32)),
        ("eos_len", C.c_size_t),
        ("stop", STOP_FN),
        ("on_token", TOKEN_FN),
        ("user_data", C.c_void_p),
    ]


class PumaError(Exception):
    pass


def load(path, sigs):
    """The library at `path`, with `sigs` (function name -> argument types; every
    function returns a status) and the error-message functions declared."""
    lib = C.CDLL(path)
    for name, args in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = C.c_int
    lib.puma_last_error.restype = C.c_char_p
    lib.puma_status_name.argtypes = [C.c_uint32]
    lib.puma_status_name.restype = C.c_char_p
    return lib


def check(lib, status, what):
    """Raises PumaError naming `what`, the status and the library's message, unless OK."""
    if status != PUMA_OK:
        raise PumaError(
            f"{what}: {lib.puma_status_name(status).decode()} ({lib.puma_last_error().decode()})"
        )
