/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the plasma tests: a small store, a client's view attached through the
 * region fds (as a client process does after SCM_RIGHTS), object IDs and byte patterns. */
#ifndef FERRY_TEST_PLASMA_H
#define FERRY_TEST_PLASMA_H

#include <string.h>

#include "plasma/store.h"
#include "ftest.h"

/* What a client maps: both regions at its own addresses, and its index view. */
struct view {
	struct ferry__plasma_arena arena;   /* object bytes */
	struct ferry__plasma_arena control; /* the index */
	struct ferry__plasma_index ix;	    /* view over them */
};

static inline void view_attach(struct ferry__plasma_store *s, struct view *v)
{
	const struct ferry__plasma_arena *a = ferry__plasma_store_arena(s);
	const struct ferry__plasma_arena *c = ferry__plasma_store_control(s);

	ftest_assert_ok(ferry__plasma_arena_attach(a->fd, a->size, 0, &v->arena));
	ftest_assert_ok(ferry__plasma_arena_attach(c->fd, c->size, 0, &v->control));
	ftest_assert_ok(ferry__plasma_index_open(&v->ix, v->control.base, v->control.size,
						 v->arena.base, v->arena.size));
}

static inline void view_detach(struct view *v)
{
	ferry__plasma_arena_destroy(&v->control);
	ferry__plasma_arena_destroy(&v->arena);
}

static inline struct ferry__plasma_store *small_store(uint64_t memory, uint32_t max_objects,
						      unsigned flags)
{
	struct ferry__plasma_store_opts o = {
		.memory_bytes = memory,
		.max_objects = max_objects,
		.max_clients = 8,
		.pin_records = 64,
		.max_chunks = 8,
		.flags = flags | FERRY__PLASMA_STORE_NO_PREFAULT,
	};
	struct ferry__plasma_store *s = NULL;

	ftest_assert_ok(ferry__plasma_store_create(&o, &s));
	return s;
}

/* A structured ID, like the ones tasks make: a number then fixed bytes. */
static inline struct ferry_object_id oid(uint32_t n)
{
	struct ferry_object_id id;

	memset(id.bytes, 0xa5, sizeof(id.bytes));
	memcpy(id.bytes, &n, sizeof(n));
	return id;
}

/* Bytes of object @n, generation @gen: never the poison byte, different per object. */
static inline uint8_t pattern(uint32_t n, uint32_t gen)
{
	uint8_t b = (uint8_t)(n * 37u + gen * 101u + 11u);

	return b == FERRY__PLASMA_POISON_BYTE ? 0x11 : b;
}

static inline void fill_object(const struct ferry__plasma_object *o, uint32_t n)
{
	memset(o->data, pattern(n, o->gen), o->data_size + o->metadata_size);
}

/* 1 if every byte of the object is its pattern. */
static inline int object_intact(const struct ferry__plasma_object *o, uint32_t n)
{
	uint8_t want = pattern(n, o->gen);

	for (uint64_t i = 0; i < o->data_size + o->metadata_size; i++)
		if (o->data[i] != want)
			return 0;
	return 1;
}

/* Create @n through the store for @slot, fill it and seal it. */
static inline void put_object(struct ferry__plasma_store *s, uint32_t slot, uint32_t n,
			      uint64_t size, unsigned flags, struct ferry__plasma_object *out)
{
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object o;

	ftest_assert_ok(ferry__plasma_store_object_create(s, slot, &id, size, 0, flags, &o));
	fill_object(&o, n);
	ftest_assert_int_ge(ferry__plasma_index_seal(ferry__plasma_store_index(s), slot, &o), 0);
	if (out)
		*out = o;
}

#endif
