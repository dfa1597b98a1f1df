/*
 * Secure text generation through the puma-rs C API: P1 owns a GPT-2 checkpoint (by
 * default the Shakespeare model shipped in models/gpt2-shakespeare), P0 is the client
 * with a prompt, and the three parties generate tokens greedily with the secret-shared KV
 * cache, all in one session: one key setup, one model share, one generation. Only P0
 * learns the generated ids (here the parties only share the logits' argmax: secure-argmax
 * mode). The "network" is a function call: every frame a session polls is handed at once
 * to the session it is addressed to.
 *
 * The prompt is given as GPT-2 token ids (the tokenizer stays on the Rust side: e.g.
 * `puma_layers::Gpt2Tokenizer`); "ROMEO:" is 33676 4720 25.
 *
 * Build (from the repository root, after `cargo build -p puma-ffi`):
 *   cc -std=c11 -Wall -Wextra -Iffi/include examples/c/generate.c \
 *      target/debug/libpuma_ffi.a -lpthread -ldl -lm -o generate
 * Run: ./generate models/gpt2-shakespeare 4 33676 4720 25
 * Prints the generated ids ("ids: ...") and "ok".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "puma.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    puma_status st_ = (call);                                                        \
    if (st_ != PUMA_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,      \
              puma_status_name((uint32_t)st_), puma_last_error());                  \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Runs what every session has just started (or its close) until all three are done. */
static void run(puma_session *s[3], uint8_t *buf, size_t buf_len, puma_event_kind until) {
  int done[3] = {0, 0, 0};
  while (!(done[0] && done[1] && done[2])) {
    int progress = 0;
    for (uint32_t i = 0; i < 3; i++) {
      while (!done[i]) {
        puma_event ev;
        CHECK(puma_session_poll(s[i], buf, buf_len, &ev));
        if (ev.kind == PUMA_EVENT_TRANSMIT) {
          CHECK(puma_session_handle_frame(s[ev.peer], i, buf, ev.frame_len));
          progress = 1;
        } else if (ev.kind == PUMA_EVENT_PENDING) {
          break;
        } else if (ev.kind == until) {
          done[i] = 1;
          progress = 1;
        }
      }
    }
    if (!progress) {
      fprintf(stderr, "no party can make progress\n");
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL_DIR MAX_NEW PROMPT_ID...\n", argv[0]);
    return 2;
  }
  const char *model_dir = argv[1];
  size_t max_new = strtoul(argv[2], NULL, 10);
  size_t prompt_len = (size_t)argc - 3;
  uint32_t *prompt = malloc(prompt_len * sizeof *prompt);
  uint32_t *ids = malloc((max_new ? max_new : 1) * sizeof *ids);
  size_t buf_len = PUMA_MAX_FRAME_LEN;
  uint8_t *buf = malloc(buf_len);
  if (!prompt || !ids || !buf) return 1;
  for (size_t i = 0; i < prompt_len; i++) prompt[i] = (uint32_t)strtoul(argv[3 + i], NULL, 10);

  puma_session *s[3];
  for (uint32_t i = 0; i < 3; i++) {
    /* Example entropy; a real party reads 32 bytes from the OS. */
    uint8_t entropy[32];
    memset(entropy, (int)(7 * i + 1), sizeof entropy);
    CHECK(puma_session_new(i, 2026, entropy, sizeof entropy, &s[i]));
  }

  /* P1 shares the model: it reads the checkpoint, the others its public config.json. */
  char config[4096];
  snprintf(config, sizeof config, "%s/config.json", model_dir);
  for (uint32_t i = 0; i < 3; i++)
    CHECK(puma_session_start_model_share(s[i], 1, i == 1 ? model_dir : config));
  run(s, buf, buf_len, PUMA_EVENT_DONE);
  puma_model *m[3];
  for (int i = 0; i < 3; i++) CHECK(puma_session_take_model(s[i], &m[i]));
  puma_model_info info;
  CHECK(puma_model_get_info(m[0], &info));
  printf("model: %zu layers, width %zu, %zu positions, vocabulary %zu\n", info.n_layer,
         info.d_model, info.max_positions, info.vocab_size);

  /* P0 generates: the others pass no prompt, only its (public) length. */
  for (uint32_t i = 0; i < 3; i++)
    CHECK(puma_session_start_generate(s[i], m[i], 0, i == 0 ? prompt : NULL, prompt_len, max_new,
                                      PUMA_OUTPUT_SECURE_ARGMAX));
  run(s, buf, buf_len, PUMA_EVENT_DONE);
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    size_t written = 0;
    CHECK(puma_session_take_ids(s[i], i == 0 ? ids : NULL, i == 0 ? max_new : 0, &written));
    if (i == 0) n = written;
    else if (written != 0) {
      fprintf(stderr, "P%d learned %zu ids\n", i, written);
      return 1;
    }
  }
  printf("ids:");
  for (size_t i = 0; i < n; i++) printf(" %u", ids[i]);
  printf("\n");

  puma_stats st;
  CHECK(puma_session_stats(s[0], &st));
  printf("P0: %llu operations, %llu rounds, %llu setup bytes\n",
         (unsigned long long)st.operations, (unsigned long long)st.rounds,
         (unsigned long long)st.setup_bytes_sent);

  /* A clean end: every party closes and sends its last frames. */
  for (int i = 0; i < 3; i++) CHECK(puma_session_close(s[i]));
  run(s, buf, buf_len, PUMA_EVENT_CLOSED);
  for (int i = 0; i < 3; i++) {
    CHECK(puma_model_free(m[i]));
    CHECK(puma_session_free(s[i]));
  }
  free(prompt);
  free(ids);
  free(buf);
  if (n != max_new) {
    fprintf(stderr, "%zu ids, expected %zu\n", n, max_new);
    return 1;
  }
  printf("ok\n");
  return 0;
}
