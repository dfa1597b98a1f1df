/*
 * Misuse of the C API from C: null handles, misaligned and foreign pointers, short
 * buffers, double free, calls in the wrong state and frames from the wrong party. Each
 * must return its documented status (and, run under valgrind by ffi/tests/examples.rs,
 * touch no invalid memory). Prints "ok" and exits 0 when every check holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "puma.h"

static int failures = 0;

#define EXPECT(call, want)                                                            \
  do {                                                                                \
    puma_status got_ = (call);                                                        \
    if (got_ != (want)) {                                                             \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
              #call, puma_status_name((uint32_t)got_), puma_status_name((uint32_t)(want)), \
              puma_last_error());                                                     \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)

static puma_session *new_session(uint32_t party) {
  uint8_t entropy[32];
  memset(entropy, (int)party + 1, sizeof entropy);
  puma_session *s = NULL;
  EXPECT(puma_session_new(party, 7, entropy, sizeof entropy, &s), PUMA_OK);
  return s;
}

int main(void) {
  puma_session *s[3] = {new_session(0), new_session(1), new_session(2)};
  puma_event ev;
  uint8_t small[8];
  size_t buf_len = PUMA_MAX_FRAME_LEN;
  uint8_t *buf = malloc(buf_len);
  if (!buf) return 1;

  /* Null handles and out-pointers. */
  EXPECT(puma_session_poll(NULL, buf, buf_len, &ev), PUMA_ERR_NULL_POINTER);
  EXPECT(puma_session_poll(s[0], buf, buf_len, NULL), PUMA_ERR_NULL_POINTER);
  EXPECT(puma_session_start_gelu(s[0], NULL, PUMA_GELU_PUMA), PUMA_ERR_NULL_POINTER);
  EXPECT(puma_session_handle_frame(NULL, 1, buf, 64), PUMA_ERR_NULL_POINTER);
  EXPECT(puma_session_new(0, 7, NULL, 32, &s[0]), PUMA_ERR_NULL_POINTER);
  if (strlen(puma_last_error()) == 0) {
    fprintf(stderr, "no last error after a failure\n");
    failures++;
  }
  EXPECT(puma_session_free(NULL), PUMA_OK);
  if (strlen(puma_last_error()) != 0) {
    fprintf(stderr, "a last error after a success\n");
    failures++;
  }

  /* Misaligned and foreign pointers. */
  EXPECT(puma_session_poll((puma_session *)((char *)s[0] + 1), buf, buf_len, &ev),
         PUMA_ERR_MISALIGNED_POINTER);
  uint64_t fake[8] = {0};
  EXPECT(puma_session_poll((puma_session *)fake, buf, buf_len, &ev), PUMA_ERR_INVALID_HANDLE);

  /* Wrong state: nothing runs, no result waits. */
  EXPECT(puma_session_handle_timeout(s[0]), PUMA_ERR_WRONG_STATE);
  puma_tensor *t = NULL;
  EXPECT(puma_session_take_tensor(s[0], &t), PUMA_ERR_WRONG_STATE);

  /* A tensor used as a session, and a tensor of another party. */
  double v[2] = {1.5, -0.5};
  puma_tensor *pub[3];
  for (int i = 0; i < 3; i++)
    EXPECT(puma_tensor_from_public(s[i], v, 2, 1, 2, &pub[i]), PUMA_OK);
  EXPECT(puma_session_poll((puma_session *)pub[0], buf, buf_len, &ev), PUMA_ERR_INVALID_HANDLE);
  EXPECT(puma_session_start_gelu(s[0], pub[1], PUMA_GELU_PUMA), PUMA_ERR_INVALID_ARGUMENT);
  EXPECT(puma_tensor_from_public(s[0], v, 3, 1, 2, &t), PUMA_ERR_INVALID_ARGUMENT);

  /* Short buffer: the frame stays for the next poll. */
  for (int i = 0; i < 3; i++) EXPECT(puma_session_start_gelu(s[i], pub[i], PUMA_GELU_PUMA), PUMA_OK);
  EXPECT(puma_session_start_gelu(s[0], pub[0], PUMA_GELU_PUMA), PUMA_ERR_WRONG_STATE);
  EXPECT(puma_session_close(s[0]), PUMA_ERR_WRONG_STATE);
  EXPECT(puma_session_poll(s[0], small, sizeof small, &ev), PUMA_ERR_INSUFFICIENT_SIZE);
  size_t needed = ev.frame_len;
  if (ev.kind != PUMA_EVENT_TRANSMIT || needed <= sizeof small) {
    fprintf(stderr, "short buffer: event %d, frame_len %zu\n", (int)ev.kind, needed);
    failures++;
  }
  EXPECT(puma_session_poll(s[0], buf, buf_len, &ev), PUMA_OK);
  if (ev.kind != PUMA_EVENT_TRANSMIT || ev.frame_len != needed || ev.peer != 2) {
    fprintf(stderr, "the kept frame did not come back\n");
    failures++;
  }

  /* Frames from the wrong party: P0's frame to P2, claimed to come from P1 or P2 itself. */
  EXPECT(puma_session_handle_frame(s[2], 2, buf, ev.frame_len), PUMA_ERR_INVALID_ARGUMENT);
  EXPECT(puma_session_handle_frame(s[2], 5, buf, ev.frame_len), PUMA_ERR_INVALID_ARGUMENT);
  EXPECT(puma_session_handle_frame(s[2], 1, buf, ev.frame_len), PUMA_ERR_PROTOCOL);
  /* P2's operation failed: abort frames for its peers, then DONE with the error. */
  puma_status last;
  int aborts = 0;
  for (;;) {
    last = puma_session_poll(s[2], buf, buf_len, &ev);
    if (ev.kind != PUMA_EVENT_TRANSMIT) break;
    aborts++;
  }
  EXPECT(last, PUMA_ERR_PROTOCOL);
  if (ev.kind != PUMA_EVENT_DONE || aborts != 2) {
    fprintf(stderr, "after the bad frame: event %d, %d frames\n", (int)ev.kind, aborts);
    failures++;
  }

  /* Double free: detected, nothing touched. */
  for (int i = 0; i < 3; i++) EXPECT(puma_tensor_free(pub[i]), PUMA_OK);
  EXPECT(puma_tensor_free(pub[0]), PUMA_ERR_INVALID_HANDLE);
  for (int i = 0; i < 3; i++) EXPECT(puma_session_free(s[i]), PUMA_OK);
  EXPECT(puma_session_free(s[1]), PUMA_ERR_INVALID_HANDLE);
  EXPECT(puma_session_poll(s[2], buf, buf_len, &ev), PUMA_ERR_INVALID_HANDLE);
  free(buf);

  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
