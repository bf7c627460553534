/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Identifiers: random generation, hex text, hashing.
 *
 * Random IDs come from a per-thread xoshiro256** generator seeded from getrandom(2): an ID is
 * made on every put, and a getrandom syscall per put would cost more than the put itself.
 * The generator remembers the pid it was seeded in and reseeds in a forked child, so parent
 * and child never produce the same sequence.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <ferry/id.h>

#include "common/hash.h"

struct rng {
	uint64_t s[4]; /* xoshiro256** state */
	pid_t pid;     /* process that seeded it; 0 = unseeded */
};

static __thread struct rng thread_rng;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static void seed(struct rng *r)
{
	size_t got = 0;

	while (got < sizeof(r->s)) {
		ssize_t n = getrandom((char *)r->s + got, sizeof(r->s) - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* No entropy syscall (very old kernel or seccomp): fall back to time and
			 * addresses; IDs must be unique, not secret. */
			r->s[0] ^= ferry__hash64((uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)r);
			r->s[1] ^= ferry__hash64((uint64_t)time(NULL));
			break;
		}
		got += (size_t)n;
	}
	if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
		r->s[0] = 1;
	r->pid = getpid();
}

static uint64_t next(void)
{
	struct rng *r = &thread_rng;
	uint64_t result, t;

	if (r->pid != getpid())
		seed(r);
	result = rotl(r->s[1] * 5, 7) * 9;
	t = r->s[1] << 17;
	r->s[2] ^= r->s[0];
	r->s[3] ^= r->s[1];
	r->s[1] ^= r->s[2];
	r->s[0] ^= r->s[3];
	r->s[2] ^= t;
	r->s[3] = rotl(r->s[3], 45);
	return result;
}

void ferry_id_random(void *id, size_t size)
{
	uint8_t *p = id;

	do {
		for (size_t i = 0; i < size; i += 8) {
			uint64_t v = next();
			size_t n = size - i < 8 ? size - i : 8;

			memcpy(p + i, &v, n);
		}
	} while (ferry_id_is_nil(id, size));
}

bool ferry_id_is_nil(const void *id, size_t size)
{
	const uint8_t *p = id;

	for (size_t i = 0; i < size; i++)
		if (p[i])
			return false;
	return true;
}

int ferry_id_to_hex(const void *id, size_t size, char *out, size_t out_size)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *p = id;

	if (out_size < 2 * size + 1)
		return -ENOSPC;
	for (size_t i = 0; i < size; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * size] = '\0';
	return (int)(2 * size);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int ferry_id_from_hex(const char *hex, void *id, size_t size)
{
	uint8_t tmp[64];

	if (!hex || size > sizeof(tmp) || strlen(hex) != 2 * size)
		return -EINVAL;
	for (size_t i = 0; i < size; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		tmp[i] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(id, tmp, size); /* @id untouched on error */
	return 0;
}

uint64_t ferry_id_hash(const void *id, size_t size)
{
	return ferry__hash_bytes(id, size, 0);
}

static void object_id_from_task(const struct ferry_task_id *task, uint32_t index,
				struct ferry_object_id *out)
{
	memcpy(out->bytes, task->bytes, FERRY_UNIQUE_ID_SIZE);
	for (int i = 0; i < 4; i++)
		out->bytes[FERRY_UNIQUE_ID_SIZE + i] = (uint8_t)(index >> (8 * i));
}

void ferry_object_id_for_task(const struct ferry_task_id *task, uint32_t index,
			      struct ferry_object_id *out)
{
	object_id_from_task(task, index & 0x7fffffffu, out);
}

void ferry_object_id_for_put(const struct ferry_task_id *task, uint32_t seq,
			     struct ferry_object_id *out)
{
	object_id_from_task(task, seq | 0x80000000u, out);
}
