/* SPDX-License-Identifier: Apache-2.0 */
/* Hash map: against a reference model under random churn, growth under OOM, iteration. */
#include <stdlib.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "ftest.h"

FTEST(put_get_remove_basic)
{
	struct ferry__hashmap m;
	uint64_t key = 42, out;
	void *v;

	ferry__hashmap_init(&m, sizeof(key), sizeof(uint64_t));
	ftest_assert_ptr_null(ferry__hashmap_get(&m, &key));
	ftest_assert_int_eq(ferry__hashmap_put(&m, &key, &v), 1);
	*(uint64_t *)v = 7;
	ftest_assert_int_eq(ferry__hashmap_put(&m, &key, &v), 0);
	ftest_assert_uint_eq(*(uint64_t *)v, 7);
	ftest_assert_int_eq(ferry__hashmap_remove(&m, &key, &out), 0);
	ftest_assert_uint_eq(out, 7);
	ftest_assert_errno(ferry__hashmap_remove(&m, &key, NULL), -ENOENT);
	ftest_assert_uint_eq(ferry__hashmap_count(&m), 0);
	ferry__hashmap_fini(&m);
}

/* Random inserts and deletes over a small key space (many collisions and long runs),
 * checked against a direct-indexed model after every step. */
FTEST(random_churn_matches_model)
{
	enum { KEYS = 2000, STEPS = 200000 };
	static int64_t model[KEYS];
	struct ferry__hashmap m;

	ferry__hashmap_init(&m, sizeof(uint32_t), sizeof(int64_t));
	srand(1234);
	for (int i = 0; i < KEYS; i++)
		model[i] = -1;
	for (int step = 0; step < STEPS; step++) {
		uint32_t key = (uint32_t)rand() % KEYS;
		void *v;

		if (rand() % 3) {
			int r = ferry__hashmap_put(&m, &key, &v);

			ftest_assert_int_eq(r, model[key] < 0 ? 1 : 0);
			*(int64_t *)v = step;
			model[key] = step;
		} else {
			int r = ferry__hashmap_remove(&m, &key, NULL);

			ftest_assert_int_eq(r, model[key] < 0 ? -ENOENT : 0);
			model[key] = -1;
		}
		if (step % 997 == 0) {
			size_t live = 0;

			for (uint32_t k = 0; k < KEYS; k++) {
				int64_t *got = ferry__hashmap_get(&m, &k);

				if (model[k] < 0) {
					ftest_assert_ptr_null(got);
				} else {
					ftest_assert_ptr_notnull(got);
					ftest_assert_int_eq(*got, model[k]);
					live++;
				}
			}
			ftest_assert_uint_eq(ferry__hashmap_count(&m), live);
		}
	}
	ferry__hashmap_fini(&m);
}

FTEST(grow_failure_leaves_map_intact)
{
	struct ferry__hashmap m;
	uint32_t key;
	void *v;
	int r;

	ferry__hashmap_init(&m, sizeof(key), sizeof(uint32_t));
	for (key = 0; key < 12; key++)
		ftest_assert_int_eq(ferry__hashmap_put(&m, &key, &v), 1);
	/* The 13th entry crosses 3/4 of 16 slots and must grow; fail that allocation. */
	ferry__alloc_fail_after(0);
	r = ferry__hashmap_put(&m, &key, &v);
	ftest_assert_errno(r, -ENOMEM);
	ftest_assert_uint_eq(ferry__hashmap_count(&m), 12);
	for (uint32_t k = 0; k < 12; k++)
		ftest_assert_ptr_notnull(ferry__hashmap_get(&m, &k));
	ftest_assert_int_eq(ferry__hashmap_put(&m, &key, &v), 1);
	ferry__hashmap_fini(&m);
}

FTEST(iteration_visits_each_once)
{
	struct ferry__hashmap m;
	size_t cursor = 0, seen = 0;
	uint64_t sum = 0;
	void *k, *v;

	ferry__hashmap_init(&m, sizeof(uint64_t), 0);
	for (uint64_t i = 1; i <= 100; i++)
		ftest_assert_int_eq(ferry__hashmap_put(&m, &i, &v), 1);
	while (ferry__hashmap_next(&m, &cursor, &k, &v)) {
		sum += *(uint64_t *)k;
		seen++;
	}
	ftest_assert_uint_eq(seen, 100);
	ftest_assert_uint_eq(sum, 5050);
	ferry__hashmap_fini(&m);
}

/* Keys whose size is not a multiple of 8 must still give 8-byte aligned values (values often
 * hold pointers; UBSan flags a misaligned load). */
FTEST(values_are_aligned_after_odd_keys)
{
	struct ferry__hashmap m;
	uint8_t key[20] = {0};
	void *v;

	ferry__hashmap_init(&m, sizeof(key), sizeof(void *));
	for (int i = 0; i < 100; i++) {
		key[0] = (uint8_t)i;
		ftest_assert_int_eq(ferry__hashmap_put(&m, key, &v), 1);
		ftest_assert_uint_eq((uintptr_t)v % 8, 0);
		*(void **)v = &m;
	}
	key[0] = 42;
	v = ferry__hashmap_get(&m, key);
	ftest_assert_ptr_eq(*(void **)v, &m);
	ferry__hashmap_fini(&m);
}
