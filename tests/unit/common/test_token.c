/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster token file: one reader for every program, a too-long token refused, never cut. */
#include <stdio.h>
#include <string.h>

#include "common/token.h"
#include "ftest.h"

static const char *write_token(const char *name, const char *bytes, size_t len)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", ftest_tmpdir(), name);
	f = fopen(path, "w");
	ftest_assert_ptr_notnull(f);
	ftest_assert_uint_eq(fwrite(bytes, 1, len, f), len);
	fclose(f);
	return path;
}

FTEST(one_trailing_newline_dropped)
{
	char buf[FERRY_TOKEN_MAX];

	ftest_assert_int_eq(ferry__token_read(write_token("t", "abc\n", 4), buf, sizeof(buf)), 3);
	ftest_assert_int_eq(memcmp(buf, "abc", 3), 0);
	ftest_assert_int_eq(ferry__token_read(write_token("t2", "abc\n\n", 5), buf, sizeof(buf)),
			    4);
	ftest_assert_int_eq(ferry__token_read(write_token("t3", "abc", 3), buf, sizeof(buf)), 3);
}

/* A node used to read 256 bytes of a longer token and then be refused as a wrong one. */
FTEST(longest_token_read_whole_and_longer_refused)
{
	char bytes[FERRY_TOKEN_MAX + 2], buf[FERRY_TOKEN_MAX];

	memset(bytes, 'x', sizeof(bytes));
	bytes[FERRY_TOKEN_MAX] = '\n';
	ftest_assert_int_eq(
		ferry__token_read(write_token("max", bytes, FERRY_TOKEN_MAX + 1), buf, sizeof(buf)),
		FERRY_TOKEN_MAX);
	ftest_assert_errno(ferry__token_read(write_token("long", bytes, FERRY_TOKEN_MAX + 2), buf,
					     sizeof(buf)),
			   -E2BIG);
	memset(bytes, 'y', sizeof(bytes));
	ftest_assert_errno(
		ferry__token_read(write_token("long2", bytes, sizeof(bytes)), buf, sizeof(buf)),
		-E2BIG);
}

FTEST(empty_missing_and_small_buffer)
{
	char buf[FERRY_TOKEN_MAX];
	char path[512];

	ftest_assert_errno(ferry__token_read(write_token("empty", "\n", 1), buf, sizeof(buf)),
			   -EINVAL);
	ftest_assert_errno(ferry__token_read(write_token("empty2", "", 0), buf, sizeof(buf)),
			   -EINVAL);
	snprintf(path, sizeof(path), "%s/none", ftest_tmpdir());
	ftest_assert_errno(ferry__token_read(path, buf, sizeof(buf)), -ENOENT);
	ftest_assert_errno(ferry__token_read(write_token("t", "abc", 3), buf, 16), -EINVAL);
}
