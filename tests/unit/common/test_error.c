/* SPDX-License-Identifier: Apache-2.0 */
/* ferry_strerror(): the one error-text function, for -errno and errno alike, from any thread. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <ferry/common.h>

#include "ftest.h"

FTEST(domain_meanings_either_sign)
{
	ftest_assert_str_eq(ferry_strerror(0), "Success");
	ftest_assert_str_eq(ferry_strerror(-ENOSPC), ferry_strerror(ENOSPC));
	ftest_assert_ptr_notnull(strstr(ferry_strerror(-ENOSPC), "store or disk full"));
	ftest_assert_ptr_notnull(strstr(ferry_strerror(-ECONNRESET), "peer gone"));
	ftest_assert_ptr_notnull(strstr(ferry_strerror(-ETIMEDOUT), "deadline"));
	ftest_assert_ptr_notnull(strstr(ferry_strerror(-EPROTO), "malformed"));
	ftest_assert_ptr_notnull(strstr(ferry_strerror(-EUSERS), "client limit"));
	ftest_assert_str_eq(ferry_strerror(-ENOENT), "No such file or directory");
	ftest_assert_str_eq(ferry_strerror(1 << 20), "Unknown error");
}

/* Since file errors are worded here too, EACCES may be a file's mode as well as a token. */
FTEST(permission_denied_names_both_causes)
{
	const char *s = ferry_strerror(EACCES);

	ftest_assert_ptr_notnull(strstr(s, "Permission denied"));
	ftest_assert_ptr_notnull(strstr(s, "file"));
	ftest_assert_ptr_notnull(strstr(s, "token"));
}

static void *describe_many(void *arg)
{
	int err = *(int *)arg;
	const char *first = ferry_strerror(err);

	for (int i = 0; i < 100000; i++)
		if (ferry_strerror(err) != first || ferry_strerror(-err) != first)
			return (void *)1;
	return NULL;
}

/* No shared buffer: each thread's text stays its own while others describe other errors. */
FTEST(threads_get_stable_texts)
{
	int errs[4] = {ENOENT, EINVAL, ENOSPC, 12345};
	pthread_t t[4];
	void *r;

	for (int i = 0; i < 4; i++)
		ftest_assert_int_eq(pthread_create(&t[i], NULL, describe_many, &errs[i]), 0);
	for (int i = 0; i < 4; i++) {
		ftest_assert_int_eq(pthread_join(t[i], &r), 0);
		ftest_assert_ptr_null(r);
	}
}
