/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An open-addressing hash map with fixed-size keys and values stored inline (one flat array:
 * no allocation per entry). Linear probing; deletion shifts later entries back, so there are
 * no tombstones and lookups stay short after churn. Grows at 3/4 load.
 *
 * Thread model: not thread-safe; the owner serialises access.
 * Pointers returned by get/put stay valid until the next put or remove.
 */
#ifndef FERRY_COMMON_HASHMAP_H
#define FERRY_COMMON_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

struct ferry__hashmap {
	uint64_t *hashes;    /* per slot: 0 = empty, else the key's hash with bit 63 set */
	uint8_t *entries;    /* per slot: key, padding to 8, then the value */
	size_t capacity;     /* slots, a power of two (0 before the first put) */
	size_t count;	     /* live entries */
	size_t key_size;     /* bytes compared and hashed */
	size_t value_size;   /* bytes of value after each key */
	size_t value_offset; /* key_size rounded up to 8: values holding pointers stay aligned */
	size_t entry_size;   /* value_offset + value_size rounded up to 8 */
	uint64_t seed;	     /* hash seed */
};

/* ferry__hashmap_init() - an empty map; allocates nothing. */
void ferry__hashmap_init(struct ferry__hashmap *m, size_t key_size, size_t value_size);
void ferry__hashmap_fini(struct ferry__hashmap *m);

/* ferry__hashmap_get() - the value stored for @key, or NULL. */
void *ferry__hashmap_get(const struct ferry__hashmap *m, const void *key);

/*
 * ferry__hashmap_put() - find or insert @key. *@value points to its value slot (zeroed when
 * new). Returns 1 if inserted, 0 if it existed, -ENOMEM (map unchanged) if growing failed.
 */
int ferry__hashmap_put(struct ferry__hashmap *m, const void *key, void **value);

/* ferry__hashmap_remove() - remove @key, copying its value to @value_out if not NULL.
 * Returns 0 or -ENOENT. */
int ferry__hashmap_remove(struct ferry__hashmap *m, const void *key, void *value_out);

static inline size_t ferry__hashmap_count(const struct ferry__hashmap *m)
{
	return m->count;
}

/*
 * ferry__hashmap_next() - iterate: start with *@cursor = 0; returns 1 and sets @key/@value
 * for each entry, 0 at the end. The map must not change during iteration.
 */
int ferry__hashmap_next(const struct ferry__hashmap *m, size_t *cursor, void **key, void **value);

#endif
