/*
 * The C API under a real asynchronous host: one thread per party, one queue per inbox,
 * every frame delayed by a random 0-2 ms in its sender, hosts that sometimes wait as long
 * before starting an operation, and no barrier between operations. Each party runs the README's loop (poll; send on TRANSMIT; on PENDING wait
 * for a frame and hand it in) over the same sequence of operations: shares, matrix
 * products, softmaxes and reveals to each party in turn, checked against the same
 * computation in plain C doubles; then P1 shares a GPT-2 checkpoint and the parties
 * generate tokens for P0 in the same session; P0 prints them ("ids: ...", checked
 * against the plaintext model by ffi/tests/async_c.rs). Finally every party closes.
 *
 * Usage: async_parties SEED MODEL_DIR [OPERATIONS]
 * Exit status 0 and "ok" on success.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "puma.h"

enum { DIM = 3, ELEMS = DIM * DIM, SLOTS = 4, MAX_NEW = 3 };

/* The prompt "Hello world" (GPT-2 ids). */
static const uint32_t PROMPT[] = {15496, 995};
enum { PROMPT_LEN = sizeof PROMPT / sizeof PROMPT[0] };

/* ---- inboxes: one queue of frames per party ---- */

typedef struct frame {
  struct frame *next;
  uint32_t from;
  size_t len;
  uint8_t bytes[];
} frame;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  frame *head, *tail;
} inbox;

static inbox inboxes[3];

static void push(uint32_t to, uint32_t from, const uint8_t *bytes, size_t len) {
  frame *f = malloc(sizeof *f + len);
  if (!f) abort();
  f->next = NULL;
  f->from = from;
  f->len = len;
  memcpy(f->bytes, bytes, len);
  inbox *q = &inboxes[to];
  pthread_mutex_lock(&q->mu);
  if (q->tail)
    q->tail->next = f;
  else
    q->head = f;
  q->tail = f;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* Waits for the next frame of party `me` (at most 30 s: a hang is a failure). */
static frame *pop(uint32_t me) {
  inbox *q = &inboxes[me];
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  pthread_mutex_lock(&q->mu);
  while (!q->head) {
    if (pthread_cond_timedwait(&q->cv, &q->mu, &deadline) != 0) break;
  }
  frame *f = q->head;
  if (f) {
    q->head = f->next;
    if (!q->head) q->tail = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  return f;
}

/* ---- deterministic randomness ---- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * ((double)(splitmix(s) >> 11) / 9007199254740992.0);
}

/* ---- one party ---- */

typedef struct {
  uint32_t me;
  uint64_t seed;
  const char *model_dir;
  int operations;
  int failed;
  uint32_t ids[MAX_NEW];
  size_t n_ids;
} party;

#define FAIL(p, ...)                                   \
  do {                                                 \
    fprintf(stderr, "P%u: ", (p)->me);                 \
    fprintf(stderr, __VA_ARGS__);                      \
    fprintf(stderr, " (%s)\n", puma_last_error());     \
    (p)->failed = 1;                                   \
    return;                                            \
  } while (0)

#define TRY(p, call)                                                               \
  do {                                                                             \
    puma_status st_ = (call);                                                      \
    if (st_ != PUMA_OK) FAIL(p, "%s: %s", #call, puma_status_name((uint32_t)st_)); \
  } while (0)

/* The README's loop: runs the started operation (or the close) until DONE (or CLOSED). */
static puma_status drive(party *p, puma_session *s, uint8_t *buf, size_t buf_len,
                         uint64_t *delay_rng, puma_event_kind until) {
  for (;;) {
    puma_event ev;
    puma_status st = puma_session_poll(s, buf, buf_len, &ev);
    if (ev.kind == until || st != PUMA_OK) return st;
    if (ev.kind == PUMA_EVENT_TRANSMIT) {
      struct timespec d = {0, (long)(splitmix(delay_rng) % 2001) * 1000};
      nanosleep(&d, NULL);
      push(ev.peer, p->me, buf, ev.frame_len);
    } else if (ev.kind == PUMA_EVENT_PENDING) {
      frame *f = pop(p->me);
      if (!f) {
        fprintf(stderr, "P%u: no frame for 30 s\n", p->me);
        return PUMA_ERR_TIMEOUT;
      }
      st = puma_session_handle_frame(s, f->from, f->bytes, f->len);
      free(f);
      if (st != PUMA_OK) return st;
    } else if (ev.kind != PUMA_EVENT_YIELDED) {
      fprintf(stderr, "P%u: unexpected event %d\n", p->me, (int)ev.kind);
      return PUMA_ERR_BUG;
    }
  }
}

static void matmul_ref(const double *a, const double *b, double *c) {
  for (int r = 0; r < DIM; r++)
    for (int k = 0; k < DIM; k++) {
      double acc = 0.0;
      for (int j = 0; j < DIM; j++) acc += a[r * DIM + j] * b[j * DIM + k];
      c[r * DIM + k] = acc;
    }
}

static void softmax_ref(const double *a, double *c) {
  for (int r = 0; r < DIM; r++) {
    double mx = a[r * DIM];
    for (int k = 1; k < DIM; k++) mx = fmax(mx, a[r * DIM + k]);
    double sum = 0.0;
    for (int k = 0; k < DIM; k++) sum += exp(a[r * DIM + k] - mx);
    for (int k = 0; k < DIM; k++) c[r * DIM + k] = exp(a[r * DIM + k] - mx) / sum;
  }
}

static void run_ops(party *p, puma_session *s, uint8_t *buf, size_t buf_len,
                    uint64_t *delay_rng) {
  /* Every party draws the same public sequence (and, for the checks, the same values). */
  uint64_t ops_rng = p->seed;
  puma_tensor *slot[SLOTS] = {NULL};
  double ref[SLOTS][ELEMS];
  int depth[SLOTS] = {0};
  uint32_t reveal_to = 0;
  int reveals = 0;
  for (int k = 0; k < p->operations; k++) {
    int kind = k < SLOTS ? 0 : (int)(splitmix(&ops_rng) % 100);
    int a = k < SLOTS ? k : (int)(splitmix(&ops_rng) % SLOTS);
    int b = (int)(splitmix(&ops_rng) % SLOTS);
    int c = (int)(splitmix(&ops_rng) % SLOTS);
    /* A host that is sometimes slow to start the next operation: the parties drift. */
    if (splitmix(delay_rng) % 4 == 0) {
      struct timespec d = {0, (long)(splitmix(delay_rng) % 2001) * 1000};
      nanosleep(&d, NULL);
    }
    /* Keep values small: long chains are replaced by fresh shares. */
    if (kind >= 30 && kind < 75 && (depth[a] >= 3 || depth[b] >= 3)) kind = 0;
    puma_tensor *out = NULL;
    if (kind < 30) {
      uint32_t owner = (uint32_t)(splitmix(&ops_rng) % 3);
      double v[ELEMS];
      for (int i = 0; i < ELEMS; i++) v[i] = uniform(&ops_rng, -0.5, 0.5);
      TRY(p, puma_session_start_share(s, owner, p->me == owner ? v : NULL, ELEMS, DIM, DIM));
      TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
      TRY(p, puma_session_take_tensor(s, &out));
      memcpy(ref[a], v, sizeof v);
      depth[a] = 0;
      c = a;
    } else if (kind < 60) {
      TRY(p, puma_session_start_matmul(s, slot[a], slot[b]));
      TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
      TRY(p, puma_session_take_tensor(s, &out));
      double r[ELEMS];
      matmul_ref(ref[a], ref[b], r);
      memcpy(ref[c], r, sizeof r);
      depth[c] = (depth[a] > depth[b] ? depth[a] : depth[b]) + 1;
    } else if (kind < 75) {
      TRY(p, puma_session_start_softmax(s, slot[a]));
      TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
      TRY(p, puma_session_take_tensor(s, &out));
      double r[ELEMS];
      softmax_ref(ref[a], r);
      memcpy(ref[c], r, sizeof r);
      depth[c] = depth[a] + 1;
    } else {
      uint32_t to = reveal_to;
      reveal_to = (reveal_to + 1) % 3;
      TRY(p, puma_session_start_reveal(s, slot[a], to));
      TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
      double v[ELEMS];
      size_t written = 0;
      TRY(p, puma_session_take_values(s, v, ELEMS, &written));
      if (written != (p->me == to ? (size_t)ELEMS : 0)) FAIL(p, "op %d: %zu values", k, written);
      /* Fixed point (2^-18) and the approximations: at most 1e-4 per step of the chain. */
      double tol = 1e-4 * (1 + depth[a]);
      for (size_t i = 0; i < written; i++)
        if (fabs(v[i] - ref[a][i]) > tol)
          FAIL(p, "op %d: revealed %.6f, expected %.6f", k, v[i], ref[a][i]);
      reveals++;
      continue;
    }
    if (slot[c]) TRY(p, puma_tensor_free(slot[c]));
    slot[c] = out;
  }
  for (int i = 0; i < SLOTS; i++) TRY(p, puma_tensor_free(slot[i]));
  if (p->operations >= 100 && reveals < 10) FAIL(p, "only %d reveals", reveals);
}

static void run_model(party *p, puma_session *s, uint8_t *buf, size_t buf_len,
                      uint64_t *delay_rng) {
  char path[4096];
  /* The owner (P1) reads the checkpoint; the others only its public config.json. */
  if (p->me == 1)
    snprintf(path, sizeof path, "%s", p->model_dir);
  else
    snprintf(path, sizeof path, "%s/config.json", p->model_dir);
  TRY(p, puma_session_start_model_share(s, 1, path));
  TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
  puma_model *m = NULL;
  TRY(p, puma_session_take_model(s, &m));
  uint32_t mode = (uint32_t)(p->seed % 3); /* reveal logits, secure argmax, private */
  puma_status st = puma_session_start_generate(s, m, 0, p->me == 0 ? PROMPT : NULL, PROMPT_LEN,
                                               MAX_NEW, mode);
  /* The operation keeps its own reference to the model. */
  TRY(p, puma_model_free(m));
  TRY(p, st);
  TRY(p, drive(p, s, buf, buf_len, delay_rng, PUMA_EVENT_DONE));
  TRY(p, puma_session_take_ids(s, p->ids, MAX_NEW, &p->n_ids));
  if (p->n_ids != (p->me == 0 ? (size_t)MAX_NEW : 0)) FAIL(p, "%zu ids", p->n_ids);
}

static void *party_main(void *arg) {
  party *p = arg;
  uint64_t delay_rng = p->seed * 3 + p->me;
  uint8_t entropy[32];
  uint64_t e = p->seed ^ (0x1234567ULL * (p->me + 1));
  for (int i = 0; i < 4; i++) {
    uint64_t w = splitmix(&e);
    memcpy(entropy + 8 * i, &w, 8);
  }
  puma_session *s = NULL;
  size_t buf_len = PUMA_MAX_FRAME_LEN;
  uint8_t *buf = malloc(buf_len);
  if (!buf) abort();
  if (puma_session_new(p->me, p->seed, entropy, sizeof entropy, &s) != PUMA_OK) {
    p->failed = 1;
  } else {
    run_ops(p, s, buf, buf_len, &delay_rng);
    if (!p->failed && p->model_dir) run_model(p, s, buf, buf_len, &delay_rng);
    if (!p->failed) {
      puma_status st = puma_session_close(s);
      if (st == PUMA_OK) st = drive(p, s, buf, buf_len, &delay_rng, PUMA_EVENT_CLOSED);
      if (st != PUMA_OK) {
        fprintf(stderr, "P%u: close: %s (%s)\n", p->me, puma_status_name((uint32_t)st),
                puma_last_error());
        p->failed = 1;
      }
    }
    puma_session_free(s);
  }
  free(buf);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SEED MODEL_DIR [OPERATIONS]\n", argv[0]);
    return 2;
  }
  uint64_t seed = strtoull(argv[1], NULL, 10);
  int operations = argc > 3 ? atoi(argv[3]) : 200;
  party parties[3];
  pthread_t threads[3];
  for (uint32_t i = 0; i < 3; i++) {
    pthread_mutex_init(&inboxes[i].mu, NULL);
    pthread_cond_init(&inboxes[i].cv, NULL);
    parties[i] = (party){.me = i, .seed = seed, .model_dir = argv[2], .operations = operations};
  }
  for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, party_main, &parties[i]);
  int failed = 0;
  for (int i = 0; i < 3; i++) {
    pthread_join(threads[i], NULL);
    failed |= parties[i].failed;
  }
  /* Frames that arrived after their party closed (late END frames) are dropped. */
  for (int i = 0; i < 3; i++) {
    for (frame *f = inboxes[i].head; f;) {
      frame *next = f->next;
      free(f);
      f = next;
    }
    pthread_mutex_destroy(&inboxes[i].mu);
    pthread_cond_destroy(&inboxes[i].cv);
  }
  if (failed) return 1;
  printf("ids:");
  for (size_t i = 0; i < parties[0].n_ids; i++) printf(" %u", parties[0].ids[i]);
  printf("\nok\n");
  return 0;
}
