/* cuda_nodev: asking for the CUDA target must either open a device or fail cleanly with ATTN_ENODEV and a
 * one-line reason (never crash), and a CPU runtime must still open afterwards. */
#include <stdio.h>
#include <string.h>
#include "attn.h"

int main(void) {
  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CUDA, &rt);
  if (rc == ATTN_OK) {
    if (!rt) { fprintf(stderr, "attn_open returned OK with a NULL runtime\n"); return 1; }
    printf("CUDA device opened\n");
    attn_close(rt);
    return 0;
  }
  if (rc != ATTN_ENODEV) { fprintf(stderr, "attn_open(CUDA): expected ATTN_ENODEV, got %d (%s)\n", rc, attn_strerror(rc)); return 1; }
  if (rt) { fprintf(stderr, "attn_open failed but left a runtime behind\n"); return 1; }
  const char *why = attn_last_error(NULL);
  if (!why || !why[0] || strchr(why, '\n')) { fprintf(stderr, "expected a one-line reason, got \"%s\"\n", why ? why : "(null)"); return 1; }
  printf("no CUDA device: %s\n", why);
  rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK || !rt) { fprintf(stderr, "CPU runtime failed to open after the CUDA refusal: %s\n", attn_strerror(rc)); return 1; }
  attn_close(rt);
  return 0;
}
