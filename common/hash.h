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

static inline uint64_t ferry__rotl64(uint64_t x, unsigned r)
{
	return x << r | x >> (64 - r);
}

/*
 * A content check: 64 bits that change when any byte of @data changes, never 0 (0 means "no
 * check" where one is stored). Four independent multiply-rotate lanes over 32-byte blocks, so
 * the multiplies overlap (~4x ferry__hash_bytes()'s speed on long inputs); the tail and the
 * size go through ferry__hash_bytes(). Detects accidental change (memory reused by another
 * object), not deliberate collisions: it is not a cryptographic hash.
 */
static inline uint64_t ferry__hash_content(const void *data, size_t size)
{
	const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xd6e8feb86659fd93ull;
	const uint8_t *p = (const uint8_t *)data;
	uint64_t lane[4] = {k1, k2, ~k1, ~k2}, h;
	size_t i = 0;

	for (; i + 32 <= size; i += 32) {
		for (unsigned l = 0; l < 4; l++) {
			uint64_t v;

			memcpy(&v, p + i + 8 * l, 8);
			lane[l] = ferry__rotl64(lane[l] ^ v * k2, 29) * k1;
		}
	}
	h = ferry__rotl64(lane[0], 1) + ferry__rotl64(lane[1], 19) + ferry__rotl64(lane[2], 37) +
	    ferry__rotl64(lane[3], 53);
	h = ferry__hash_bytes(p + i, size - i, h ^ size);
	return h ? h : 1;
}

#endif
