/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The content check (common/hash.h) that lets a one-sided RDMA reader know the bytes it read
 * are the object's: any changed byte, a shorter or longer read, words in another order change
 * it; it does not depend on where the bytes lie in memory.
 */
#include <stdlib.h>

#include "common/hash.h"
#include "ftest.h"

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint64_t x = seed;

	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(x >> 56);
	}
}

FTEST(every_changed_byte_changes_the_check)
{
	static const size_t sizes[] = {1, 7, 8, 9, 31, 32, 33, 100, 4096, 65536};
	uint8_t *buf = malloc(65536);

	ftest_assert_ptr_notnull(buf);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		uint64_t h;

		fill(buf, n, (unsigned)k);
		h = ferry__hash_content(buf, n);
		ftest_assert_true(h != 0);
		/* Every position for the small sizes; every 61st for the large ones. */
		for (size_t i = 0; i<n; i += n> 256 ? 61 : 1) {
			for (unsigned bit = 0; bit < 8; bit += 3) {
				buf[i] ^= (uint8_t)(1u << bit);
				ftest_assert_true(ferry__hash_content(buf, n) != h);
				buf[i] ^= (uint8_t)(1u << bit);
			}
		}
		ftest_assert_uint_eq(ferry__hash_content(buf, n), h);
	}
	free(buf);
}

FTEST(a_short_or_long_read_changes_the_check)
{
	uint8_t zeros[300] = {0};

	for (size_t n = 0; n + 1 < sizeof(zeros); n++)
		ftest_assert_true(ferry__hash_content(zeros, n) !=
				  ferry__hash_content(zeros, n + 1));
}

FTEST(words_in_another_order_change_the_check)
{
	uint8_t buf[256], swapped[256];

	fill(buf, sizeof(buf), 9);
	/* Words that land in the same lane (32 bytes apart) and in different lanes. */
	for (size_t a = 0; a < 4; a++) {
		for (size_t b = a + 1; b < 12; b++) {
			memcpy(swapped, buf, sizeof(buf));
			memcpy(swapped + 8 * a, buf + 8 * b, 8);
			memcpy(swapped + 8 * b, buf + 8 * a, 8);
			ftest_assert_true(ferry__hash_content(swapped, sizeof(swapped)) !=
					  ferry__hash_content(buf, sizeof(buf)));
		}
	}
}

FTEST(the_check_does_not_depend_on_alignment)
{
	uint8_t buf[1100], moved[1104];

	fill(buf, sizeof(buf), 3);
	for (size_t off = 1; off < 4; off++) {
		memcpy(moved + off, buf, sizeof(buf));
		ftest_assert_uint_eq(ferry__hash_content(moved + off, sizeof(buf)),
				     ferry__hash_content(buf, sizeof(buf)));
	}
}
