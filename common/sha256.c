/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 as FIPS 180-4 defines it (section 6.2), written from the standard: a 64-round
 * compression over 64-byte blocks, message padded with 0x80, zeros and its bit length.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/sha256.h"

static const uint32_t k256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t st[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) +
			      k256[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));

		h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
	}
	st[0] += a, st[1] += b, st[2] += c, st[3] += d;
	st[4] += e, st[5] += f, st[6] += g, st[7] += h;
}

void ferry__sha256_init(struct ferry__sha256 *s)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(s->state, iv, sizeof(iv));
	s->bytes = 0;
	s->block_len = 0;
}

void ferry__sha256_update(struct ferry__sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	if (s->block_len) {
		size_t n = 64 - s->block_len < len ? 64 - s->block_len : len;

		memcpy(s->block + s->block_len, p, n);
		s->block_len += n, p += n, len -= n;
		if (s->block_len < 64)
			return;
		compress(s->state, s->block);
		s->block_len = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		compress(s->state, p);
	memcpy(s->block, p, len);
	s->block_len = len;
}

void ferry__sha256_final(struct ferry__sha256 *s, uint8_t out[FERRY_SHA256_SIZE])
{
	uint64_t bits = s->bytes * 8;

	s->block[s->block_len++] = 0x80;
	if (s->block_len > 56) {
		memset(s->block + s->block_len, 0, 64 - s->block_len);
		compress(s->state, s->block);
		s->block_len = 0;
	}
	memset(s->block + s->block_len, 0, 56 - s->block_len);
	for (int i = 0; i < 8; i++)
		s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	compress(s->state, s->block);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->state[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->state[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->state[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->state[i];
	}
}

void ferry__sha256(const void *data, size_t len, uint8_t out[FERRY_SHA256_SIZE])
{
	struct ferry__sha256 s;

	ferry__sha256_init(&s);
	ferry__sha256_update(&s, data, len);
	ferry__sha256_final(&s, out);
}

int ferry__sha256_fd(int fd, uint8_t out[FERRY_SHA256_SIZE])
{
	struct ferry__sha256 s;
	uint8_t buf[16384];
	ssize_t n;

	ferry__sha256_init(&s);
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		ferry__sha256_update(&s, buf, (size_t)n);
	}
	ferry__sha256_final(&s, out);
	return 0;
}
