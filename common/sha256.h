/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 (FIPS 180-4): the content hash of a job's code (runtime.fbs LeaseRequest.code_hash),
 * so a node can tell two libraries of one path apart. Pure functions, thread-safe.
 */
#ifndef FERRY_COMMON_SHA256_H
#define FERRY_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define FERRY_SHA256_SIZE 32

struct ferry__sha256 {
	uint32_t h[8];	   /* the state */
	uint64_t bytes;	   /* message bytes so far */
	uint8_t block[64]; /* a partial block */
	size_t block_len;  /* its bytes */
};

void ferry__sha256_init(struct ferry__sha256 *s);
void ferry__sha256_update(struct ferry__sha256 *s, const void *data, size_t len);
void ferry__sha256_final(struct ferry__sha256 *s, uint8_t out[FERRY_SHA256_SIZE]);

/* ferry__sha256_file() - the hash of the file at @path. 0 or -errno (not logged). */
int ferry__sha256_file(const char *path, uint8_t out[FERRY_SHA256_SIZE]);

#endif
