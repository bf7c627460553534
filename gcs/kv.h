/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS's internal key-value store with namespaces. Keys and values are byte strings; a
 * namespace is a byte string too ("" is the default one).
 *
 * Layout: a hash map from a 64-bit hash of (namespace, key) to the entry (collision chains for
 * the rare equal hashes) serves get/put/delete in O(1); a skip list ordered by (namespace, key)
 * serves prefix operations in O(log n + matches) and gives snapshots a canonical order.
 *
 * Thread model: not thread-safe; the GCS loop thread owns it. Values returned by get stay valid
 * until the next mutation of the store.
 */
#ifndef FERRY_GCS_KV_H
#define FERRY_GCS_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gcs/codec.h"

#define FERRY__KV_DEFAULT_MAX_NAMESPACE 256
#define FERRY__KV_DEFAULT_MAX_KEY 4096
#define FERRY__KV_DEFAULT_MAX_VALUE (16u << 20)

/* Limits; all zeros means the defaults above. Exceeding one is -E2BIG. */
struct ferry__kv_opts {
	size_t max_namespace_bytes; /* longest namespace */
	size_t max_key_bytes;	    /* longest key (keys are never empty) */
	size_t max_value_bytes;	    /* largest value */
};

struct ferry__kv;

int ferry__kv_create(const struct ferry__kv_opts *opts, struct ferry__kv **out);
void ferry__kv_destroy(struct ferry__kv *kv);

/*
 * ferry__kv_get() - the value of (@ns, @key) in *@value (borrowed). 0, -ENOENT, or -EINVAL /
 * -E2BIG for a key that could never have been stored.
 */
int ferry__kv_get(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
		  struct ferry__gcs_slice key, struct ferry__gcs_slice *value);

/*
 * ferry__kv_multi_get() - look up @n keys of @ns at once. values[i] is the value, or
 * {NULL, 0} with found[i] false. Returns how many were found, or -EINVAL/-E2BIG for a bad key.
 */
int ferry__kv_multi_get(const struct ferry__kv *kv, struct ferry__gcs_slice ns, size_t n,
			const struct ferry__gcs_slice *keys, struct ferry__gcs_slice *values,
			bool *found);

/*
 * ferry__kv_put() - store @value under (@ns, @key). An existing value is replaced only when
 * @overwrite. Returns 1 if the key was added, 0 if it existed (replaced or kept), -EINVAL (empty
 * key), -E2BIG (a limit), -ENOMEM (store unchanged).
 */
int ferry__kv_put(struct ferry__kv *kv, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
		  struct ferry__gcs_slice value, bool overwrite);

/* ferry__kv_exists() - 1 if (@ns, @key) is stored, 0 if not. */
int ferry__kv_exists(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
		     struct ferry__gcs_slice key);

/* ferry__kv_delete() - remove (@ns, @key). Returns 1 if it was there, 0 if not, -EINVAL or
 * -E2BIG for a key that could never have been stored. */
int ferry__kv_delete(struct ferry__kv *kv, struct ferry__gcs_slice ns, struct ferry__gcs_slice key);

/* ferry__kv_delete_prefix() - remove every key of @ns starting with @prefix (empty: all of the
 * namespace). Returns how many were removed, or -E2BIG. O(log n + removed). */
int ferry__kv_delete_prefix(struct ferry__kv *kv, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice prefix);

/*
 * A visitor: return 0 to continue, > 0 to stop (the scan returns its count so far), < 0 to stop
 * with that error. The store must not change during a scan.
 */
typedef int (*ferry__kv_visit_fn)(void *arg, struct ferry__gcs_slice ns,
				  struct ferry__gcs_slice key, struct ferry__gcs_slice value);

/*
 * ferry__kv_scan() - visit the keys of @ns starting with @prefix in byte order ("keys by
 * prefix"). @ns NULL data with size 0 and @all_namespaces visits the whole store in (namespace,
 * key) order. Returns the number visited, or the visitor's negative return.
 */
int ferry__kv_scan(const struct ferry__kv *kv, struct ferry__gcs_slice ns, bool all_namespaces,
		   struct ferry__gcs_slice prefix, ferry__kv_visit_fn fn, void *arg);

/* Entries and bytes (keys + values) stored. */
size_t ferry__kv_count(const struct ferry__kv *kv);
size_t ferry__kv_bytes(const struct ferry__kv *kv);

#endif
