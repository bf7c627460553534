/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the wire tests: storage for generated samples, hand-made buffers. */
#ifndef FERRY_TEST_WIRE_UTIL_H
#define FERRY_TEST_WIRE_UTIL_H

#include <stdint.h>
#include <string.h>

#include "common/fb.h"
#include "ftest.h"

/* Room for one sample value struct and the arrays/strings it points to. */
#define SAMPLE_VALUE_MAX 4096
#define SAMPLE_POOL_SIZE (1u << 20)

struct sample_space {
	_Alignas(16) uint8_t value[SAMPLE_VALUE_MAX]; /* the value struct */
	_Alignas(16) uint8_t pool[SAMPLE_POOL_SIZE];  /* what it points to */
};

/* A buffer assembled byte by byte, for corruptions no builder would produce. */
struct raw {
	_Alignas(16) uint8_t b[8192]; /* contents */
	size_t len;		      /* bytes used */
};

static inline void raw_u16(struct raw *r, size_t at, uint16_t v)
{
	ferry__fb_store_u16(r->b + at, v);
	if (at + 2 > r->len)
		r->len = at + 2;
}

static inline void raw_u32(struct raw *r, size_t at, uint32_t v)
{
	ferry__fb_store_u32(r->b + at, v);
	if (at + 4 > r->len)
		r->len = at + 4;
}

static inline void raw_u64(struct raw *r, size_t at, uint64_t v)
{
	ferry__fb_store_u64(r->b + at, v);
	if (at + 8 > r->len)
		r->len = at + 8;
}

/* Copy a finished builder payload into a private, 16-aligned buffer the test may corrupt. */
static inline void raw_from_builder(struct raw *r, const struct ferry__fb_builder *b)
{
	size_t n = ferry__fb_builder_size(b);

	ftest_assert_uint_le(n, sizeof(r->b));
	memcpy(r->b, ferry__fb_builder_data(b), n);
	r->len = n;
}

/* Position of field @id's inline data in a buffer the verifier accepted (0 if absent). */
static inline uint32_t raw_field(const struct raw *r, uint32_t table, unsigned id)
{
	struct ferry__fb_table t = {r->b, table};

	return ferry__fb_field(t, id);
}

static inline uint32_t raw_vtable(const struct raw *r, uint32_t table)
{
	return table - (uint32_t)ferry__fb_load_i32(r->b + table);
}

#endif
