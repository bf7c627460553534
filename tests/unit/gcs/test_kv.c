/* SPDX-License-Identifier: Apache-2.0 */
/* GCS KV: put/get/overwrite semantics, namespaces, limits, prefix scans and deletes against a
 * sorted model, and every allocation failure of put. */
#include <stdlib.h>

#include "common/alloc.h"
#include "ftest.h"
#include "gcs/kv.h"

#define S(str) ((struct ferry__gcs_slice){(str), sizeof(str) - 1})
#define NONE ((struct ferry__gcs_slice){NULL, 0})

static struct ferry__kv *new_kv(void)
{
	struct ferry__kv *kv;

	ftest_assert_ok(ferry__kv_create(NULL, &kv));
	return kv;
}

static void assert_value(struct ferry__kv *kv, struct ferry__gcs_slice ns,
			 struct ferry__gcs_slice key, const char *want)
{
	struct ferry__gcs_slice v;

	ftest_assert_ok(ferry__kv_get(kv, ns, key, &v));
	ftest_assert_uint_eq(v.size, strlen(want));
	ftest_assert_mem_eq(v.data, want, v.size);
}

FTEST(put_overwrite_and_delete)
{
	struct ferry__kv *kv = new_kv();
	struct ferry__gcs_slice v;

	ftest_assert_int_eq(ferry__kv_put(kv, S("ns"), S("k"), S("one"), false), 1);
	ftest_assert_int_eq(ferry__kv_put(kv, S("ns"), S("k"), S("two"), false), 0);
	assert_value(kv, S("ns"), S("k"), "one");
	ftest_assert_int_eq(ferry__kv_put(kv, S("ns"), S("k"), S("three"), true), 0);
	assert_value(kv, S("ns"), S("k"), "three");
	ftest_assert_int_eq(ferry__kv_put(kv, S("ns"), S("empty"), NONE, true), 1);
	assert_value(kv, S("ns"), S("empty"), "");
	ftest_assert_int_eq(ferry__kv_exists(kv, S("ns"), S("k")), 1);
	ftest_assert_uint_eq(ferry__kv_count(kv), 2);
	ftest_assert_uint_eq(ferry__kv_bytes(kv), 2 + 1 + 5 + 2 + 5);
	ftest_assert_int_eq(ferry__kv_delete(kv, S("ns"), S("k")), 1);
	ftest_assert_int_eq(ferry__kv_delete(kv, S("ns"), S("k")), 0);
	ftest_assert_errno(ferry__kv_get(kv, S("ns"), S("k"), &v), -ENOENT);
	ftest_assert_int_eq(ferry__kv_exists(kv, S("ns"), S("k")), 0);
	ferry__kv_destroy(kv);
}

FTEST(namespaces_are_separate)
{
	struct ferry__kv *kv = new_kv();
	struct ferry__gcs_slice v;

	ftest_assert_int_eq(ferry__kv_put(kv, NONE, S("k"), S("default"), false), 1);
	ftest_assert_int_eq(ferry__kv_put(kv, S("a"), S("k"), S("in a"), false), 1);
	ftest_assert_int_eq(ferry__kv_put(kv, S("ab"), S("k"), S("in ab"), false), 1);
	assert_value(kv, NONE, S("k"), "default");
	assert_value(kv, S("a"), S("k"), "in a");
	assert_value(kv, S("ab"), S("k"), "in ab");
	ftest_assert_int_eq(ferry__kv_delete_prefix(kv, S("a"), NONE), 1);
	ftest_assert_errno(ferry__kv_get(kv, S("a"), S("k"), &v), -ENOENT);
	assert_value(kv, S("ab"), S("k"), "in ab");
	ferry__kv_destroy(kv);
}

FTEST(limits_are_enforced)
{
	struct ferry__kv_opts opts = {
		.max_namespace_bytes = 4, .max_key_bytes = 8, .max_value_bytes = 16};
	static const char big[32];
	struct ferry__gcs_slice v;
	struct ferry__kv *kv;

	ftest_assert_ok(ferry__kv_create(&opts, &kv));
	ftest_assert_errno(ferry__kv_put(kv, S("ns"), NONE, S("v"), false), -EINVAL);
	ftest_assert_errno(ferry__kv_put(kv, S("ns"), S("123456789"), S("v"), false), -E2BIG);
	ftest_assert_errno(ferry__kv_put(kv, S("12345"), S("k"), S("v"), false), -E2BIG);
	ftest_assert_errno(
		ferry__kv_put(kv, S("ns"), S("k"), (struct ferry__gcs_slice){big, 17}, false),
		-E2BIG);
	ftest_assert_int_eq(ferry__kv_put(kv, S("1234"), S("12345678"),
					  (struct ferry__gcs_slice){big, 16}, false),
			    1);
	ftest_assert_errno(ferry__kv_get(kv, S("ns"), S("123456789"), &v), -E2BIG);
	ftest_assert_errno(ferry__kv_delete_prefix(kv, S("12345"), NONE), -E2BIG);
	ftest_assert_uint_eq(ferry__kv_count(kv), 1);
	ferry__kv_destroy(kv);
}

FTEST(multi_get_reports_each_key)
{
	struct ferry__kv *kv = new_kv();
	struct ferry__gcs_slice keys[3] = {S("a"), S("missing"), S("c")}, values[3];
	bool found[3];

	ftest_assert_ok(ferry__kv_put(kv, S("n"), S("a"), S("1"), false));
	ftest_assert_ok(ferry__kv_put(kv, S("n"), S("c"), S("3"), false));
	ftest_assert_int_eq(ferry__kv_multi_get(kv, S("n"), 3, keys, values, found), 2);
	ftest_assert_true(found[0] && !found[1] && found[2]);
	ftest_assert_mem_eq(values[2].data, "3", 1);
	ftest_assert_ptr_null(values[1].data);
	keys[1] = NONE;
	ftest_assert_errno(ferry__kv_multi_get(kv, S("n"), 3, keys, values, found), -EINVAL);
	ferry__kv_destroy(kv);
}

struct collected {
	char keys[64][16]; /* keys seen, NUL-terminated */
	int n;		   /* how many */
	int stop_after;	   /* return 1 after this many (0: never) */
};

static int collect(void *arg, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
		   struct ferry__gcs_slice value)
{
	struct collected *c = arg;

	(void)ns;
	(void)value;
	memcpy(c->keys[c->n], key.data, key.size);
	c->keys[c->n][key.size] = 0;
	c->n++;
	return c->stop_after && c->n == c->stop_after;
}

FTEST(scan_by_prefix_in_order)
{
	static const char *const keys[] = {"node/b", "node/a",	 "nod", "node/",
					   "job/1",  "node/c/x", "nodf"};
	struct ferry__kv *kv = new_kv();
	struct collected c = {0};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		struct ferry__gcs_slice k = {keys[i], strlen(keys[i])};

		ftest_assert_int_eq(ferry__kv_put(kv, S("ns"), k, S("v"), false), 1);
	}
	ftest_assert_ok(ferry__kv_put(kv, S("other"), S("node/z"), S("v"), false));
	ftest_assert_int_eq(ferry__kv_scan(kv, S("ns"), false, S("node/"), collect, &c), 4);
	ftest_assert_str_eq(c.keys[0], "node/");
	ftest_assert_str_eq(c.keys[1], "node/a");
	ftest_assert_str_eq(c.keys[2], "node/b");
	ftest_assert_str_eq(c.keys[3], "node/c/x");
	memset(&c, 0, sizeof(c));
	c.stop_after = 2;
	ftest_assert_int_eq(ferry__kv_scan(kv, S("ns"), false, NONE, collect, &c), 2);
	ftest_assert_str_eq(c.keys[0], "job/1");
	memset(&c, 0, sizeof(c));
	ftest_assert_int_eq(ferry__kv_scan(kv, NONE, true, NONE, collect, &c), 8);
	ftest_assert_str_eq(c.keys[7], "node/z"); /* namespace "other" sorts after "ns" */
	ftest_assert_int_eq(ferry__kv_delete_prefix(kv, S("ns"), S("node/")), 4);
	ftest_assert_uint_eq(ferry__kv_count(kv), 4);
	ferry__kv_destroy(kv);
}

/* Random keys over a small alphabet (many shared prefixes): every prefix scan and delete must
 * match a brute-force model. */
FTEST(prefix_ops_match_model)
{
	enum { N = 600, ROUNDS = 300 };
	static char model[N][8];
	static bool live[N];
	struct ferry__kv *kv = new_kv();

	srand(7);
	for (int i = 0; i < N; i++) {
		int len = 1 + rand() % 6;

		for (int j = 0; j < len; j++)
			model[i][j] = (char)('a' + rand() % 3);
		model[i][len] = 0;
	}
	for (int round = 0; round < ROUNDS; round++) {
		int i = rand() % N, action = rand() % 4;
		struct ferry__gcs_slice k = {model[i], strlen(model[i])};
		struct ferry__gcs_slice prefix = {model[i], (size_t)(rand() % 3)};
		struct collected c = {0};
		int want = 0, ret;

		if (prefix.size > k.size)
			prefix.size = k.size;
		if (action < 2) {
			ret = ferry__kv_put(kv, S("m"), k, S("v"), true);
			/* Duplicate strings in the model share a key. */
			for (int j = 0; j < N; j++)
				if (live[j] && strcmp(model[j], model[i]) == 0)
					want = 1;
			ftest_assert_int_eq(ret, want ? 0 : 1);
			live[i] = true;
			for (int j = 0; j < N; j++)
				if (strcmp(model[j], model[i]) == 0)
					live[j] = true;
			continue;
		}
		/* Count distinct live keys with the prefix. */
		for (int j = 0; j < N; j++) {
			bool dup = false;

			if (!live[j] || strncmp(model[j], model[i], prefix.size) != 0)
				continue;
			for (int q = 0; q < j; q++)
				dup |= live[q] && strcmp(model[q], model[j]) == 0;
			want += !dup;
		}
		if (action == 2) {
			c.stop_after = 0;
			ret = want <= 64 ? ferry__kv_scan(kv, S("m"), false, prefix, collect, &c)
					 : want;
			ftest_assert_int_eq(ret, want);
			for (int q = 1; q < c.n; q++)
				ftest_assert_int_lt(strcmp(c.keys[q - 1], c.keys[q]), 0);
		} else {
			ftest_assert_int_eq(ferry__kv_delete_prefix(kv, S("m"), prefix), want);
			for (int j = 0; j < N; j++)
				if (strncmp(model[j], model[i], prefix.size) == 0)
					live[j] = false;
		}
	}
	ferry__kv_destroy(kv);
}

/* Fail each allocation of a put in turn: the store is unchanged and nothing leaks. */
FTEST(put_survives_every_allocation_failure)
{
	struct ferry__kv *kv = new_kv();
	char key[16];
	int failures = 0;

	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "key%d", i);
		ftest_assert_int_eq(ferry__kv_put(kv, S("n"),
						  (struct ferry__gcs_slice){key, strlen(key)},
						  S("value"), false),
				    1);
	}
	for (long n = 0;; n++) {
		size_t before = ferry__kv_count(kv);
		int ret;

		snprintf(key, sizeof(key), "new%ld", n);
		ferry__alloc_fail_after(n);
		ret = ferry__kv_put(kv, S("n"), (struct ferry__gcs_slice){key, strlen(key)},
				    S("value"), false);
		ferry__alloc_fail_after(-1);
		if (ret == -ENOMEM) {
			failures++;
			ftest_assert_uint_eq(ferry__kv_count(kv), before);
			ftest_assert_int_eq(
				ferry__kv_exists(kv, S("n"),
						 (struct ferry__gcs_slice){key, strlen(key)}),
				0);
			continue;
		}
		ftest_assert_int_eq(ret, 1);
		break;
	}
	ftest_assert_int_ge(failures, 2); /* entry and value allocations at least */
	ferry__alloc_fail_after(0);
	/* A value that outgrows its buffer needs a new one: failing leaves the old value. */
	ftest_assert_errno(ferry__kv_put(kv, S("n"), S("key1"), S("a longer value"), true),
			   -ENOMEM);
	assert_value(kv, S("n"), S("key1"), "value");
	/* One of a similar size is written in place, allocating nothing. */
	ftest_assert_int_eq(ferry__kv_put(kv, S("n"), S("key1"), S("other"), true), 0);
	ftest_assert_int_eq(ferry__kv_put(kv, S("n"), S("key1"), S("abc"), true), 0);
	ferry__alloc_fail_after(-1);
	assert_value(kv, S("n"), S("key1"), "abc");
	ferry__kv_destroy(kv);
}
