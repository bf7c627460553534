/* SPDX-License-Identifier: Apache-2.0 */
/* GCS key-value store: hash map for point operations, skip list for ordered prefix scans. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/kv.h"

/* 24 levels with p = 1/4 keep searches logarithmic up to ~2^48 keys. */
#define MAX_LEVEL 24

struct entry {
	struct entry *chain;  /* next entry whose (namespace, key) hashes the same */
	uint64_t hash;	      /* hash of (namespace, key) */
	uint8_t *value;	      /* ferry__malloc'd value bytes, NULL when empty */
	size_t value_size;    /* bytes of value */
	size_t value_cap;     /* bytes allocated at value */
	uint32_t ns_size;     /* namespace bytes, stored after next[] */
	uint32_t key_size;    /* key bytes, stored after the namespace */
	uint8_t level;	      /* skip list levels this entry is linked on */
	struct entry *next[]; /* per level: the next entry in (namespace, key) order */
};

struct ferry__kv {
	struct ferry__kv_opts opts;    /* limits, defaults filled in */
	struct ferry__hashmap by_hash; /* uint64 hash -> struct entry * (chain head) */
	struct entry *head;	       /* skip list sentinel with MAX_LEVEL levels */
	int level;		       /* levels in use */
	uint64_t rng;		       /* xorshift state for entry levels */
	size_t count;		       /* entries */
	size_t bytes;		       /* namespace + key + value bytes */
};

static const uint8_t *ns_bytes(const struct entry *e)
{
	return (const uint8_t *)&e->next[e->level];
}

static const uint8_t *key_bytes(const struct entry *e)
{
	return ns_bytes(e) + e->ns_size;
}

static int cmp_bytes(const void *a, size_t na, const void *b, size_t nb)
{
	int c = memcmp(a, b, FERRY_MIN(na, nb));

	if (c)
		return c;
	return na < nb ? -1 : na > nb;
}

/* Order of @e against (@ns, @key): namespace first, then key, bytewise. */
static int cmp_entry(const struct entry *e, struct ferry__gcs_slice ns, struct ferry__gcs_slice key)
{
	int c = cmp_bytes(ns_bytes(e), e->ns_size, ns.data ? ns.data : "", ns.size);

	if (c)
		return c;
	return cmp_bytes(key_bytes(e), e->key_size, key.data ? key.data : "", key.size);
}

static bool same_ns(const struct entry *e, struct ferry__gcs_slice ns)
{
	return e->ns_size == ns.size &&
	       (ns.size == 0 || memcmp(ns_bytes(e), ns.data, ns.size) == 0);
}

static bool has_prefix(const struct entry *e, struct ferry__gcs_slice prefix)
{
	return e->key_size >= prefix.size &&
	       (prefix.size == 0 || memcmp(key_bytes(e), prefix.data, prefix.size) == 0);
}

static uint64_t hash_of(struct ferry__gcs_slice ns, struct ferry__gcs_slice key)
{
	uint64_t seed = ferry__hash_bytes(ns.data ? ns.data : "", ns.size, 0x6b76u);

	return ferry__hash_bytes(key.data ? key.data : "", key.size, seed);
}

int ferry__kv_create(const struct ferry__kv_opts *opts, struct ferry__kv **out)
{
	struct ferry__kv *kv = ferry__calloc(1, sizeof(*kv));

	if (!kv)
		return -ENOMEM;
	kv->head = ferry__calloc(1, sizeof(struct entry) + MAX_LEVEL * sizeof(struct entry *));
	if (!kv->head) {
		ferry__free(kv);
		return -ENOMEM;
	}
	kv->head->level = MAX_LEVEL;
	if (opts)
		kv->opts = *opts;
	if (!kv->opts.max_namespace_bytes)
		kv->opts.max_namespace_bytes = FERRY__KV_DEFAULT_MAX_NAMESPACE;
	if (!kv->opts.max_key_bytes)
		kv->opts.max_key_bytes = FERRY__KV_DEFAULT_MAX_KEY;
	if (!kv->opts.max_value_bytes)
		kv->opts.max_value_bytes = FERRY__KV_DEFAULT_MAX_VALUE;
	ferry__hashmap_init(&kv->by_hash, sizeof(uint64_t), sizeof(struct entry *));
	kv->level = 1;
	kv->rng = 0x9e3779b97f4a7c15ull;
	*out = kv;
	return 0;
}

static void free_entry(struct entry *e)
{
	ferry__free(e->value);
	ferry__free(e);
}

void ferry__kv_destroy(struct ferry__kv *kv)
{
	struct entry *e, *next;

	if (!kv)
		return;
	for (e = kv->head->next[0]; e; e = next) {
		next = e->next[0];
		free_entry(e);
	}
	ferry__hashmap_fini(&kv->by_hash);
	ferry__free(kv->head);
	ferry__free(kv);
}

static int check_key(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
		     struct ferry__gcs_slice key)
{
	if (ns.size > kv->opts.max_namespace_bytes) {
		FLOG_WARN("gcs", "kv: namespace of %zu bytes exceeds the limit of %zu", ns.size,
			  kv->opts.max_namespace_bytes);
		return -E2BIG;
	}
	if (key.size == 0) {
		FLOG_WARN("gcs", "kv: empty key");
		return -EINVAL;
	}
	if (key.size > kv->opts.max_key_bytes) {
		FLOG_WARN("gcs", "kv: key of %zu bytes exceeds the limit of %zu", key.size,
			  kv->opts.max_key_bytes);
		return -E2BIG;
	}
	return 0;
}

static struct entry *lookup(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice key, uint64_t hash)
{
	struct entry **slot = ferry__hashmap_get(&kv->by_hash, &hash);

	for (struct entry *e = slot ? *slot : NULL; e; e = e->chain)
		if (cmp_entry(e, ns, key) == 0)
			return e;
	return NULL;
}

int ferry__kv_get(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
		  struct ferry__gcs_slice key, struct ferry__gcs_slice *value)
{
	int ret = check_key(kv, ns, key);
	struct entry *e;

	if (ret < 0)
		return ret;
	e = lookup(kv, ns, key, hash_of(ns, key));
	if (!e)
		return -ENOENT;
	value->data = e->value;
	value->size = e->value_size;
	return 0;
}

int ferry__kv_multi_get(const struct ferry__kv *kv, struct ferry__gcs_slice ns, size_t n,
			const struct ferry__gcs_slice *keys, struct ferry__gcs_slice *values,
			bool *found)
{
	int hits = 0;

	for (size_t i = 0; i < n; i++) {
		int ret = ferry__kv_get(kv, ns, keys[i], &values[i]);

		if (ret == -ENOENT) {
			values[i] = (struct ferry__gcs_slice){NULL, 0};
			found[i] = false;
			continue;
		}
		if (ret < 0)
			return ret;
		found[i] = true;
		hits++;
	}
	return hits;
}

int ferry__kv_exists(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
		     struct ferry__gcs_slice key)
{
	struct ferry__gcs_slice v;

	return ferry__kv_get(kv, ns, key, &v) == 0;
}

/* First entry >= (@ns, @key); update[i] = its predecessor on level i. */
static struct entry *seek(const struct ferry__kv *kv, struct ferry__gcs_slice ns,
			  struct ferry__gcs_slice key, struct entry **update)
{
	struct entry *x = kv->head;

	for (int i = kv->level - 1; i >= 0; i--) {
		while (x->next[i] && cmp_entry(x->next[i], ns, key) < 0)
			x = x->next[i];
		update[i] = x;
	}
	return x->next[0];
}

static int random_level(struct ferry__kv *kv)
{
	uint64_t r;
	int level = 1;

	kv->rng ^= kv->rng << 13;
	kv->rng ^= kv->rng >> 7;
	kv->rng ^= kv->rng << 17;
	for (r = kv->rng; (r & 3) == 0 && level < MAX_LEVEL; r >>= 2)
		level++;
	return level;
}

static struct entry *new_entry(struct ferry__kv *kv, struct ferry__gcs_slice ns,
			       struct ferry__gcs_slice key, struct ferry__gcs_slice value)
{
	int level = random_level(kv);
	struct entry *e =
		ferry__malloc(sizeof(*e) + (size_t)level * sizeof(e->next[0]) + ns.size + key.size);
	uint8_t *bytes;

	if (!e)
		return NULL;
	memset(e, 0, sizeof(*e));
	e->level = (uint8_t)level;
	e->ns_size = (uint32_t)ns.size;
	e->key_size = (uint32_t)key.size;
	bytes = (uint8_t *)&e->next[level];
	if (ns.size)
		memcpy(bytes, ns.data, ns.size);
	memcpy(bytes + ns.size, key.data, key.size);
	e->value_size = value.size;
	e->value_cap = value.size;
	if (value.size) {
		e->value = ferry__malloc(value.size);
		if (!e->value) {
			ferry__free(e);
			return NULL;
		}
		memcpy(e->value, value.data, value.size);
	}
	return e;
}

/* An overwrite of similar size reuses the value's buffer: a put of an existing key (the common
 * case for status keys rewritten in place) then allocates nothing. A buffer more than twice the
 * new size is replaced, so a key that shrank does not pin its old size. */
static int replace_value(struct ferry__kv *kv, struct entry *e, struct ferry__gcs_slice value)
{
	uint8_t *copy = NULL;

	if (value.size && value.size <= e->value_cap && e->value_cap / 2 <= value.size) {
		memmove(e->value, value.data, value.size);
		kv->bytes = kv->bytes - e->value_size + value.size;
		e->value_size = value.size;
		return 0;
	}
	if (value.size) {
		copy = ferry__malloc(value.size);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, value.data, value.size);
	}
	kv->bytes = kv->bytes - e->value_size + value.size;
	ferry__free(e->value);
	e->value = copy;
	e->value_size = value.size;
	e->value_cap = value.size;
	return 0;
}

static void link_entry(struct ferry__kv *kv, struct entry *e, struct entry **update)
{
	for (int i = kv->level; i < e->level; i++)
		update[i] = kv->head;
	if (e->level > kv->level)
		kv->level = e->level;
	for (int i = 0; i < e->level; i++) {
		e->next[i] = update[i]->next[i];
		update[i]->next[i] = e;
	}
	kv->count++;
	kv->bytes += e->ns_size + e->key_size + e->value_size;
}

int ferry__kv_put(struct ferry__kv *kv, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
		  struct ferry__gcs_slice value, bool overwrite)
{
	struct entry *update[MAX_LEVEL], *e, **slot;
	uint64_t hash;
	int ret = check_key(kv, ns, key);

	if (ret < 0)
		return ret;
	if (value.size > kv->opts.max_value_bytes) {
		FLOG_WARN("gcs", "kv: value of %zu bytes exceeds the limit of %zu", value.size,
			  kv->opts.max_value_bytes);
		return -E2BIG;
	}
	hash = hash_of(ns, key);
	e = lookup(kv, ns, key, hash);
	if (e)
		return overwrite ? replace_value(kv, e, value) : 0;
	e = new_entry(kv, ns, key, value);
	if (!e)
		return -ENOMEM;
	e->hash = hash;
	ret = ferry__hashmap_put(&kv->by_hash, &hash, (void **)&slot);
	if (ret < 0) {
		free_entry(e);
		return ret;
	}
	e->chain = ret ? NULL : *slot;
	*slot = e;
	seek(kv, ns, key, update);
	link_entry(kv, e, update);
	return 1;
}

static void unchain(struct ferry__kv *kv, struct entry *e)
{
	struct entry **slot = ferry__hashmap_get(&kv->by_hash, &e->hash);
	struct entry *p;

	assert(slot && *slot);
	if (*slot == e) {
		if (e->chain)
			*slot = e->chain;
		else
			ferry__hashmap_remove(&kv->by_hash, &e->hash, NULL);
		return;
	}
	for (p = *slot; p->chain != e; p = p->chain)
		assert(p->chain);
	p->chain = e->chain;
}

/* Unlink @e, whose predecessors on every level are in @update, and free it. */
static void remove_entry(struct ferry__kv *kv, struct entry *e, struct entry **update)
{
	for (int i = 0; i < e->level; i++)
		if (update[i]->next[i] == e)
			update[i]->next[i] = e->next[i];
	while (kv->level > 1 && !kv->head->next[kv->level - 1])
		kv->level--;
	unchain(kv, e);
	kv->count--;
	kv->bytes -= e->ns_size + e->key_size + e->value_size;
	free_entry(e);
}

int ferry__kv_delete(struct ferry__kv *kv, struct ferry__gcs_slice ns, struct ferry__gcs_slice key)
{
	struct entry *update[MAX_LEVEL], *e;
	int ret = check_key(kv, ns, key);

	if (ret < 0)
		return ret;
	if (!lookup(kv, ns, key, hash_of(ns, key)))
		return 0;
	e = seek(kv, ns, key, update);
	remove_entry(kv, e, update);
	return 1;
}

int ferry__kv_delete_prefix(struct ferry__kv *kv, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice prefix)
{
	struct entry *update[MAX_LEVEL], *e;
	int removed = 0;

	if (ns.size > kv->opts.max_namespace_bytes || prefix.size > kv->opts.max_key_bytes) {
		FLOG_WARN("gcs", "kv: namespace (%zu bytes) or prefix (%zu bytes) over the limit",
			  ns.size, prefix.size);
		return -E2BIG;
	}
	e = seek(kv, ns, prefix, update);
	/* After a removal update[] still holds the predecessors of the next entry: nothing lies
	 * between the removed entry and its successor on level 0. */
	while (e && same_ns(e, ns) && has_prefix(e, prefix)) {
		struct entry *next = e->next[0];

		remove_entry(kv, e, update);
		removed++;
		e = next;
	}
	return removed;
}

int ferry__kv_scan(const struct ferry__kv *kv, struct ferry__gcs_slice ns, bool all_namespaces,
		   struct ferry__gcs_slice prefix, ferry__kv_visit_fn fn, void *arg)
{
	struct entry *update[MAX_LEVEL], *e;
	int visited = 0;

	if (all_namespaces)
		e = kv->head->next[0];
	else
		e = seek(kv, ns, prefix, update);
	for (; e; e = e->next[0]) {
		struct ferry__gcs_slice ens = {ns_bytes(e), e->ns_size};
		struct ferry__gcs_slice key = {key_bytes(e), e->key_size};
		struct ferry__gcs_slice value = {e->value, e->value_size};
		int ret;

		if (!has_prefix(e, prefix)) {
			if (all_namespaces)
				continue;
			break;
		}
		if (!all_namespaces && !same_ns(e, ns))
			break;
		ret = fn(arg, ens, key, value);
		if (ret < 0)
			return ret;
		visited++;
		if (ret > 0)
			break;
	}
	return visited;
}

size_t ferry__kv_count(const struct ferry__kv *kv)
{
	return kv->count;
}

size_t ferry__kv_bytes(const struct ferry__kv *kv)
{
	return kv->bytes;
}
