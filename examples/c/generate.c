/*
 * Secure text generation through the puma-rs C API: P1 owns a GPT-2 checkpoint (by
 * default the Shakespeare model shipped in models/gpt2-shakespeare), P0 is the client
 * with a prompt, and the three parties generate tokens with the secret-shared KV cache,
 * all in one session: one key setup, one model share, two generations. Only P0 learns
 * the generated ids (here the parties only reveal each picked id: secure-argmax mode).
 * The "network" is a function call: every frame a session polls is handed at once to the
 * session it is addressed to.
 *
 * 1. Greedy: MAX_NEW tokens, each the argmax; the client's token callback prints each id
 *    as it is learned ("token: ..."), then "ids: ..." and the finish reason.
 * 2. Sampled (temperature 0.8, top-k 40, top-p 0.95, drawn on shares), ending at the
 *    model's end-of-sequence id or when the client's stop test says so (here: after a
 *    newline token, id 198; a real host decodes the ids and looks for its stop strings).
 *    Prints "sampled: ..." and the finish reason.
 *
 * The prompt is given as GPT-2 token ids (the tokenizer stays on the Rust side: e.g.
 * `puma_layers::Gpt2Tokenizer`); "ROMEO:" is 33676 4720 25.
 *
 * Build (from the repository root, after `cargo build -p puma-ffi`):
 *   cc -std=c11 -Wall -Wextra -Iffi/include examples/c/generate.c \
 *      target/debug/libpuma_ffi.a -lpthread -ldl -lm -o generate
 * Run: ./generate models/gpt2-shakespeare 4 33676 4720 25
 * Prints the generated ids ("ids: ...") and "ok". With a leading `--temperature-only`,
 * the sampled run draws at the temperature alone, without the top-k and top-p filters
 * (their computation over a 50,257-token vocabulary is most of the sampled run's cost,
 * which matters under valgrind).
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
      /* A party that is done is still polled: its peers may need the frames that end
         its last epoch. */
      for (;;) {
        puma_event ev;
        CHECK(puma_session_poll(s[i], buf, buf_len, &ev));
        if (ev.kind == PUMA_EVENT_TRANSMIT) {
          CHECK(puma_session_handle_frame(s[ev.peer], i, buf, ev.frame_len));
          progress = 1;
        } else if (ev.kind == PUMA_EVENT_PENDING) {
          break;
        } else if (ev.kind == until) {
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

static const char *finish_name(uint32_t finish) {
  switch (finish) {
    case PUMA_FINISH_LENGTH: return "length";
    case PUMA_FINISH_EOS: return "eos";
    case PUMA_FINISH_STOP: return "stop";
    case PUMA_FINISH_ENDED: return "ended";
    default: return "?";
  }
}

/* The client's token callback: each id as soon as the client learns it. */
static void print_token(void *user_data, size_t step, uint32_t id) {
  (void)user_data;
  printf("token %zu: %u\n", step, id);
  fflush(stdout);
}

/* The client's stop test: end after a newline token (GPT-2 id 198). */
static int32_t stop_after_newline(void *user_data, const uint32_t *ids, size_t len) {
  (void)user_data;
  return len > 0 && ids[len - 1] == 198;
}

/* Takes P0's ids (the others must have none) and the finish reason; returns the count. */
static size_t take_ids(puma_session *s[3], uint32_t *ids, size_t cap, uint32_t *finish) {
  size_t n = 0;
  CHECK(puma_session_result_finish(s[0], finish));
  for (int i = 0; i < 3; i++) {
    size_t written = 0;
    CHECK(puma_session_take_ids(s[i], i == 0 ? ids : NULL, i == 0 ? cap : 0, &written));
    if (i == 0) n = written;
    else if (written != 0) {
      fprintf(stderr, "P%d learned %zu ids\n", i, written);
      exit(1);
    }
  }
  return n;
}

int main(int argc, char **argv) {
  int filters = 1;
  if (argc > 1 && strcmp(argv[1], "--temperature-only") == 0) {
    filters = 0;
    argv++;
    argc--;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: %s [--temperature-only] MODEL_DIR MAX_NEW PROMPT_ID...\n",
            argv[0]);
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

  /* P0 generates greedily: the others pass no prompt, only its (public) length; only the
   * client's callbacks are used. */
  puma_generate_options opts;
  CHECK(puma_generate_options_init(&opts));
  opts.max_new = max_new;
  opts.mode = PUMA_OUTPUT_SECURE_ARGMAX;
  opts.on_token = print_token;
  for (uint32_t i = 0; i < 3; i++)
    CHECK(puma_session_start_generate_with(s[i], m[i], 0, i == 0 ? prompt : NULL, prompt_len,
                                           &opts));
  run(s, buf, buf_len, PUMA_EVENT_DONE);
  uint32_t finish = 0;
  size_t n = take_ids(s, ids, max_new, &finish);
  printf("ids:");
  for (size_t i = 0; i < n; i++) printf(" %u", ids[i]);
  printf("\n");
  printf("finish: %s\n", finish_name(finish));

  /* Sampled, with the model's end-of-sequence id and the client's stop test (every party
   * passes the same rules; only the client passes the test). */
  opts.temperature = 0.8;
  if (filters) {
    opts.top_k = 40;
    opts.top_p = 0.95;
  }
  opts.flags = PUMA_GENERATE_MODEL_EOS | PUMA_GENERATE_CLIENT_STOPS;
  opts.on_token = NULL;
  for (uint32_t i = 0; i < 3; i++) {
    opts.stop = i == 0 ? stop_after_newline : NULL;
    CHECK(puma_session_start_generate_with(s[i], m[i], 0, i == 0 ? prompt : NULL, prompt_len,
                                           &opts));
  }
  run(s, buf, buf_len, PUMA_EVENT_DONE);
  uint32_t sampled_finish = 0;
  size_t sampled = take_ids(s, ids, max_new, &sampled_finish);
  printf("sampled:");
  for (size_t i = 0; i < sampled; i++) printf(" %u", ids[i]);
  printf("\n");
  printf("sampled finish: %s\n", finish_name(sampled_finish));
  if (sampled == 0 || sampled > max_new ||
      (sampled < max_new && sampled_finish == PUMA_FINISH_LENGTH)) {
    fprintf(stderr, "%zu sampled ids, finish %s\n", sampled, finish_name(sampled_finish));
    return 1;
  }

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
