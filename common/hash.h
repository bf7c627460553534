/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Non-cryptographic hashing for tables and shard routing. Stable across processes and runs
 * (shards route by it), so never seeded from randomness; tables that face untrusted keys
 * pass their own seed.
 */
#ifndef FERRY_COMMON_HASH_H
#define FERRY_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A 64-bit finaliser (splitmix64's): every input bit affects every output bit. */
static inline uint64_t ferry__hash64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* Hash @size bytes: 8 bytes at a time folded through a multiply-mix, then finalised. */
static inline uint64_t ferry__hash_bytes(const void *data, size_t size, uint64_t seed)
{
	const uint8_t *p = (const uint8_t *)data;
	uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * (size + 1));
	size_t i = 0;

	for (; i + 8 <= size; i += 8) {
		uint64_t v;

		memcpy(&v, p + i, 8);
		h = (h ^ ferry__hash64(v)) * 0x9e3779b97f4a7c15ull;
	}
	if (i < size) {
		uint64_t v = 0;

		memcpy(&v, p + i, size - i);
		h = (h ^ ferry__hash64(v ^ (size - i))) * 0x9e3779b97f4a7c15ull;
	}
	return ferry__hash64(h);
}

#endif
