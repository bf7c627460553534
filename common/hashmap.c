/* SPDX-License-Identifier: Apache-2.0 */
/* Open-addressing hash map: linear probing with backward-shift deletion. */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/hashmap.h"

#define OCCUPIED (1ull << 63)

void ferry__hashmap_init(struct ferry__hashmap *m, size_t key_size, size_t value_size)
{
	memset(m, 0, sizeof(*m));
	m->key_size = key_size;
	m->value_size = value_size;
	m->value_offset = (key_size + 7) & ~(size_t)7;
	m->entry_size = (m->value_offset + value_size + 7) & ~(size_t)7;
	m->seed = 0x5bd1e995u;
}

void ferry__hashmap_fini(struct ferry__hashmap *m)
{
	ferry__free(m->hashes);
	ferry__free(m->entries);
	m->hashes = NULL;
	m->entries = NULL;
	m->capacity = m->count = 0;
}

static uint64_t hash_key(const struct ferry__hashmap *m, const void *key)
{
	return ferry__hash_bytes(key, m->key_size, m->seed) | OCCUPIED;
}

static uint8_t *entry(const struct ferry__hashmap *m, size_t slot)
{
	return m->entries + slot * m->entry_size;
}

/* Slot holding @key, or the empty slot where it would go. Capacity must be > count. */
static size_t probe(const struct ferry__hashmap *m, const void *key, uint64_t h)
{
	size_t mask = m->capacity - 1;
	size_t slot = h & mask;

	while (m->hashes[slot]) {
		if (m->hashes[slot] == h && memcmp(entry(m, slot), key, m->key_size) == 0)
			return slot;
		slot = (slot + 1) & mask;
	}
	return slot;
}

void *ferry__hashmap_get(const struct ferry__hashmap *m, const void *key)
{
	size_t slot;
	uint64_t h;

	if (m->count == 0)
		return NULL;
	h = hash_key(m, key);
	slot = probe(m, key, h);
	return m->hashes[slot] ? entry(m, slot) + m->value_offset : NULL;
}

static int grow(struct ferry__hashmap *m)
{
	size_t capacity = m->capacity ? m->capacity * 2 : 16;
	struct ferry__hashmap bigger = *m;

	bigger.hashes = ferry__calloc(capacity, sizeof(uint64_t));
	bigger.entries = ferry__calloc(capacity, m->entry_size);
	if (!bigger.hashes || !bigger.entries) {
		ferry__free(bigger.hashes);
		ferry__free(bigger.entries);
		return -ENOMEM;
	}
	bigger.capacity = capacity;
	for (size_t i = 0; i < m->capacity; i++) {
		size_t slot;

		if (!m->hashes[i])
			continue;
		slot = probe(&bigger, entry(m, i), m->hashes[i]);
		bigger.hashes[slot] = m->hashes[i];
		memcpy(entry(&bigger, slot), entry(m, i), m->entry_size);
	}
	ferry__free(m->hashes);
	ferry__free(m->entries);
	*m = bigger;
	return 0;
}

int ferry__hashmap_put(struct ferry__hashmap *m, const void *key, void **value)
{
	uint64_t h = hash_key(m, key);
	size_t slot;

	if (m->count) {
		slot = probe(m, key, h);
		if (m->hashes[slot]) {
			*value = entry(m, slot) + m->value_offset;
			return 0;
		}
	}
	if ((m->count + 1) * 4 > m->capacity * 3) {
		int ret = grow(m);

		if (ret < 0)
			return ret;
	}
	slot = probe(m, key, h);
	m->hashes[slot] = h;
	memcpy(entry(m, slot), key, m->key_size);
	memset(entry(m, slot) + m->key_size, 0, m->entry_size - m->key_size);
	m->count++;
	*value = entry(m, slot) + m->value_offset;
	return 1;
}

int ferry__hashmap_remove(struct ferry__hashmap *m, const void *key, void *value_out)
{
	size_t mask = m->capacity - 1;
	size_t hole, slot;

	if (m->count == 0)
		return -ENOENT;
	hole = probe(m, key, hash_key(m, key));
	if (!m->hashes[hole])
		return -ENOENT;
	if (value_out)
		memcpy(value_out, entry(m, hole) + m->value_offset, m->value_size);
	/* Backward shift: pull each later entry of the run into the hole unless its home slot
	 * lies cyclically in (hole, slot], where moving it would make it unreachable. */
	for (slot = (hole + 1) & mask; m->hashes[slot]; slot = (slot + 1) & mask) {
		size_t home = m->hashes[slot] & mask;

		if (((slot - home) & mask) < ((slot - hole) & mask))
			continue;
		m->hashes[hole] = m->hashes[slot];
		memcpy(entry(m, hole), entry(m, slot), m->entry_size);
		hole = slot;
	}
	m->hashes[hole] = 0;
	m->count--;
	return 0;
}

int ferry__hashmap_next(const struct ferry__hashmap *m, size_t *cursor, void **key, void **value)
{
	for (size_t i = *cursor; i < m->capacity; i++) {
		if (!m->hashes[i])
			continue;
		*key = entry(m, i);
		*value = entry(m, i) + m->value_offset;
		*cursor = i + 1;
		return 1;
	}
	*cursor = m->capacity;
	return 0;
}
