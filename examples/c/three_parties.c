/*
 * Three parties in one process, driven through the puma-rs C API: P0 secret-shares a
 * 4x8 matrix X, P1 an 8x6 matrix W; the parties compute Y = X.W, G = GeLU(Y) and
 * S = softmax(G) (row-wise) on shares and reveal Y, G and S to P0, which checks them
 * against the same computation in plain C doubles. The "network" is a function call: every
 * frame a session polls is handed at once to the session it is addressed to.
 *
 * Build (from the repository root, after `cargo build -p puma-ffi`):
 *   cc -std=c11 -Wall -Wextra -Iffi/include examples/c/three_parties.c \
 *      target/debug/libpuma_ffi.a -lpthread -ldl -lm -o three_parties
 * Exit status 0 and "ok" on success.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "puma.h"

enum { M = 4, K = 8, N = 6 };

#define CHECK(call)                                                                  \
  do {                                                                               \
    puma_status st_ = (call);                                                        \
    if (st_ != PUMA_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,      \
              puma_status_name((uint32_t)st_), puma_last_error());                  \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Runs the operation every session has just started until all three are done. */
static void run_operation(puma_session *s[3], uint8_t *buf, size_t buf_len) {
  int done[3] = {0, 0, 0};
  while (!(done[0] && done[1] && done[2])) {
    int progress = 0;
    for (uint32_t i = 0; i < 3; i++) {
      /* A party that is done is still polled: its peers may need the frames that end
         its last epoch. */
      for (;;) {
        puma_event ev;
        puma_status st = puma_session_poll(s[i], buf, buf_len, &ev);
        if (st != PUMA_OK) {
          fprintf(stderr, "P%u: poll failed: %s (%s)\n", i, puma_status_name((uint32_t)st),
                  puma_last_error());
          exit(1);
        }
        if (ev.kind == PUMA_EVENT_TRANSMIT) {
          /* Deliver at once: frames to one peer stay in order. */
          CHECK(puma_session_handle_frame(s[ev.peer], i, buf, ev.frame_len));
          progress = 1;
        } else if (ev.kind == PUMA_EVENT_YIELDED) {
          continue;
        } else if (ev.kind == PUMA_EVENT_PENDING) {
          break;
        } else {
          if (!done[i]) progress = 1;
          done[i] = 1;
          break;
        }
      }
    }
    if (!progress) {
      fprintf(stderr, "no party can make progress\n");
      exit(1);
    }
  }
}

/* Starts nothing: takes the tensor result at every party. */
static void take_tensors(puma_session *s[3], puma_tensor *out[3]) {
  for (int i = 0; i < 3; i++) CHECK(puma_session_take_tensor(s[i], &out[i]));
}

/* Reveals t to P0 and copies the values (n of them) to out. */
static void reveal_to_p0(puma_session *s[3], puma_tensor *t[3], double *out, size_t n,
                         uint8_t *buf, size_t buf_len) {
  for (int i = 0; i < 3; i++) CHECK(puma_session_start_reveal(s[i], t[i], 0));
  run_operation(s, buf, buf_len);
  for (int i = 0; i < 3; i++) {
    size_t written = 0;
    CHECK(puma_session_take_values(s[i], out, n, &written));
    /* Only P0 learns the values. */
    if (written != (i == 0 ? n : 0)) {
      fprintf(stderr, "P%d got %zu values\n", i, written);
      exit(1);
    }
  }
}

static void free_all(puma_tensor *t[3]) {
  for (int i = 0; i < 3; i++) CHECK(puma_tensor_free(t[i]));
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (d > m) m = d;
  }
  return m;
}

/* A small deterministic generator for the example's data, uniform in [-2, 2). */
static double next_value(uint64_t *state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return ((double)(*state >> 11) / 9007199254740992.0) * 4.0 - 2.0;
}

static int fill_entropy(uint8_t out[32]) {
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f) return 0;
  size_t got = fread(out, 1, 32, f);
  fclose(f);
  return got == 32;
}

int main(void) {
  double x[M * K], w[K * N];
  uint64_t state = 42;
  for (int i = 0; i < M * K; i++) x[i] = next_value(&state);
  for (int i = 0; i < K * N; i++) w[i] = next_value(&state);

  /* Plaintext reference. */
  double y_ref[M * N], g_ref[M * N], s_ref[M * N];
  for (int r = 0; r < M; r++) {
    for (int c = 0; c < N; c++) {
      double acc = 0.0;
      for (int k = 0; k < K; k++) acc += x[r * K + k] * w[k * N + c];
      y_ref[r * N + c] = acc;
      g_ref[r * N + c] = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
    }
    double mx = g_ref[r * N];
    for (int c = 1; c < N; c++) mx = fmax(mx, g_ref[r * N + c]);
    double sum = 0.0;
    for (int c = 0; c < N; c++) sum += exp(g_ref[r * N + c] - mx);
    for (int c = 0; c < N; c++) s_ref[r * N + c] = exp(g_ref[r * N + c] - mx) / sum;
  }

  /* One session per party; the same session id, fresh entropy each. */
  puma_session *s[3];
  for (uint32_t i = 0; i < 3; i++) {
    uint8_t entropy[32];
    if (!fill_entropy(entropy)) {
      fprintf(stderr, "cannot read /dev/urandom\n");
      return 1;
    }
    CHECK(puma_session_new(i, 2024, entropy, sizeof entropy, &s[i]));
  }
  size_t buf_len = PUMA_MAX_FRAME_LEN;
  uint8_t *buf = malloc(buf_len);
  if (!buf) return 1;

  /* P0 shares X, P1 shares W: the other parties pass NULL and the public shape. */
  puma_tensor *tx[3], *tw[3], *ty[3], *tg[3], *ts[3];
  for (uint32_t i = 0; i < 3; i++)
    CHECK(puma_session_start_share(s[i], 0, i == 0 ? x : NULL, M * K, M, K));
  run_operation(s, buf, buf_len);
  take_tensors(s, tx);
  for (uint32_t i = 0; i < 3; i++)
    CHECK(puma_session_start_share(s[i], 1, i == 1 ? w : NULL, K * N, K, N));
  run_operation(s, buf, buf_len);
  take_tensors(s, tw);

  for (int i = 0; i < 3; i++) CHECK(puma_session_start_matmul(s[i], tx[i], tw[i]));
  run_operation(s, buf, buf_len);
  take_tensors(s, ty);
  for (int i = 0; i < 3; i++) CHECK(puma_session_start_gelu(s[i], ty[i], PUMA_GELU_PRECISE_ERF));
  run_operation(s, buf, buf_len);
  take_tensors(s, tg);
  for (int i = 0; i < 3; i++) CHECK(puma_session_start_softmax(s[i], tg[i]));
  run_operation(s, buf, buf_len);
  take_tensors(s, ts);

  size_t rows = 0, cols = 0;
  CHECK(puma_tensor_shape(ts[2], &rows, &cols));
  if (rows != M || cols != N) {
    fprintf(stderr, "softmax output is %zux%zu\n", rows, cols);
    return 1;
  }

  double y[M * N], g[M * N], sm[M * N];
  reveal_to_p0(s, ty, y, M * N, buf, buf_len);
  reveal_to_p0(s, tg, g, M * N, buf, buf_len);
  reveal_to_p0(s, ts, sm, M * N, buf, buf_len);

  double ey = max_abs_diff(y, y_ref, M * N);
  double eg = max_abs_diff(g, g_ref, M * N);
  double es = max_abs_diff(sm, s_ref, M * N);
  printf("max |error|: matmul %.3g, gelu %.3g, softmax %.3g\n", ey, eg, es);

  puma_stats st;
  for (int i = 0; i < 3; i++) {
    CHECK(puma_session_stats(s[i], &st));
    printf("P%d: %llu operations, %llu rounds, %llu bytes sent\n", i,
           (unsigned long long)st.operations, (unsigned long long)st.rounds,
           (unsigned long long)(st.bytes_sent[0] + st.bytes_sent[1] + st.bytes_sent[2]));
  }

  free_all(tx);
  free_all(tw);
  free_all(ty);
  free_all(tg);
  free_all(ts);
  for (int i = 0; i < 3; i++) CHECK(puma_session_free(s[i]));
  free(buf);

  /* Fixed point has 2^-18 = 3.8e-6 resolution; the bounds leave room for the documented
   * approximation errors (precise GeLU <= 1.3e-4, softmax's exp 3.5e-6 and reciprocal).
   * Measured: matmul 1.1e-5, GeLU 3.5e-5, softmax 8.6e-6. */
  if (ey > 5e-5 || eg > 2e-4 || es > 1e-4) {
    fprintf(stderr, "secure results differ from the plaintext ones\n");
    return 1;
  }
  printf("ok\n");
  return 0;
}
