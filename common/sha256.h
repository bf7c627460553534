/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 (FIPS 180-4): the content hash of a job's code (runtime.fbs code_hash), which a
 * worker checks before it loads the library. Small and portable rather than fast: it hashes a
 * library once per worker. Thread model: a context belongs to one thread; no shared state.
 */
#ifndef FERRY_COMMON_SHA256_H
#define FERRY_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define FERRY_SHA256_SIZE 32

struct ferry__sha256 {
	uint32_t state[8]; /* the running hash */
	uint64_t bytes;	   /* message bytes so far */
	uint8_t block[64]; /* a partial block */
	size_t block_len;  /* its bytes */
};

void ferry__sha256_init(struct ferry__sha256 *s);
void ferry__sha256_update(struct ferry__sha256 *s, const void *data, size_t len);
void ferry__sha256_final(struct ferry__sha256 *s, uint8_t out[FERRY_SHA256_SIZE]);

/* ferry__sha256() - the hash of @len bytes at @data, in one call. */
void ferry__sha256(const void *data, size_t len, uint8_t out[FERRY_SHA256_SIZE]);

/* ferry__sha256_fd() - the hash of what is left to read from @fd (read to its end). 0, or the
 * read's -errno. */
int ferry__sha256_fd(int fd, uint8_t out[FERRY_SHA256_SIZE]);

#endif
