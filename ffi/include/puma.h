/* puma-rs C API. Keep in sync with ffi/src/lib.rs (ffi/tests/abi.rs checks it). */
#ifndef PUMA_H
#define PUMA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by every fallible function. PUMA_OK is 0. */
typedef enum puma_status {
  PUMA_OK = 0,
  PUMA_ERR_NULL_POINTER = 1,
  PUMA_ERR_INVALID_ARGUMENT = 2,
  PUMA_ERR_PROTOCOL = 3,
  PUMA_ERR_ABORTED = 4,
  PUMA_ERR_TIMEOUT = 5,
  PUMA_ERR_BUG = 6,
  PUMA_ERR_PANIC = 7,
} puma_status;

/* The library version, a static NUL-terminated string. Never NULL; do not free. */
const char *puma_version(void);

/* A static name for a status code ("PUMA_UNKNOWN_STATUS" if none). Do not free. */
const char *puma_status_name(uint32_t status);

/* *out = round(x * 2^frac_bits) in two's complement; written only on PUMA_OK.
 * PUMA_ERR_NULL_POINTER if out is NULL; PUMA_ERR_INVALID_ARGUMENT if frac_bits is not in
 * 1..=40 or x is not finite or does not fit. */
puma_status puma_fixed_encode(double x, uint32_t frac_bits, uint64_t *out);

/* *out = (int64_t)v / 2^frac_bits; written only on PUMA_OK. */
puma_status puma_fixed_decode(uint64_t v, uint32_t frac_bits, double *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PUMA_H */
