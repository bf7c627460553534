/* SPDX-License-Identifier: Apache-2.0 */
/* Test support shared by the GCS record tests (test_gcs_record.c, test_state.c): encode one op
 * into a fresh buffer, asserting that encoding worked. */
#ifndef FERRY_TEST_GCS_RECORD_UTIL_H
#define FERRY_TEST_GCS_RECORD_UTIL_H

#include "ftest.h"
#include "gcs/ops.h"

/* @op's record in a new buffer (ferry__gcs_buf_fini() frees it). */
static inline struct ferry__gcs_buf encode(const struct ferry__gcs_op *op)
{
	struct ferry__gcs_buf b = {0};
	struct ferry__gcs_writer w = {&b, 0};

	ferry__gcs_op_encode(op, &w);
	ftest_assert_ok(w.err);
	return b;
}

#endif
