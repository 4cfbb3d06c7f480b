/* digest.c: SHA-256 of compiled artifacts (OpenSSL's EVP), the content hash a kernel is checked against before it is
 * loaded: the database records it with every artifact, and the runtime compares cached files with it. */
#include <openssl/evp.h>
#include <stdio.h>
#include "db.h"

int attn_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  out[0] = '\0';
  if (!EVP_Digest(data ? data : "", len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) return -1;
  for (unsigned i = 0; i < mdlen; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
  return 0;
}
