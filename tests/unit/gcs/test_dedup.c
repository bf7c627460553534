/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request deduplication: a window per client and the bound on clients, the state answering a resent
 * (client, seq) with its first result (in memory and after a restart on the WAL, also from a
 * snapshot), failed requests not remembered, the server-made records round-tripping the codec,
 * and every allocation failure leaving the table consistent.
 */
#include "common/alloc.h"
#include "ftest.h"
#include "gcs/dedup.h"
#include "gcs/state.h"

static const uint8_t client_a[16] = {1, 2, 3}, client_b[16] = {9}, client_c[16] = {7, 7};

FTEST(dedup_keeps_a_window_per_client)
{
	struct ferry__gcs_dedup d;
	struct ferry__gcs_dedup_key k;
	const uint64_t w = FERRY__GCS_DEDUP_WINDOW;
	size_t cursor = 0, n = 0;
	int32_t status;

	ferry__gcs_dedup_init(&d, 2);
	for (uint64_t seq = 1; seq <= w + 50; seq++)
		ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_a, seq, (int32_t)(seq % 3)));
	ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_a, w + 50, 7)); /* known: kept */
	ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_b, 50, -2));
	/* client_a's seqs 1..50 gave their slots to w+1..w+50; client_b's seq 50 is its own. */
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 50, &status), 0);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 51, &status), 1);
	ftest_assert_int_eq(status, 51 % 3);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, w + 50, &status), 1);
	ftest_assert_int_eq(status, (int)((w + 50) % 3));
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_b, 50, &status), 1);
	ftest_assert_int_eq(status, -2);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_b, 51, &status), 0);
	/* Oldest client first, every entry once. */
	while (ferry__gcs_dedup_next(&d, &cursor, &k, &status)) {
		ftest_assert_mem_eq(k.client, n < w ? client_a : client_b, 16);
		n++;
	}
	ftest_assert_uint_eq(n, w + 1);
	/* A third client pushes out the oldest (client_a) as a whole. */
	ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_c, 1, 1));
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 51, &status), 0);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_b, 50, &status), 1);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_c, 1, &status), 1);
	ferry__gcs_dedup_fini(&d);
}

/* The window used last is cached; a window pushed out must never be answered from the cache,
 * even when the new client's window then fails to allocate (ASan sees a stale one). */
FTEST(dedup_evicted_window_is_not_cached)
{
	struct ferry__gcs_dedup d;
	int32_t status;

	ferry__gcs_dedup_init(&d, 1);
	ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_a, 1, 5));
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 1, &status), 1);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(ferry__gcs_dedup_remember(&d, client_b, 1, 6), -ENOMEM);
	ferry__alloc_fail_after(-1);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 1, &status), 0);
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_b, 1, &status), 0);
	ftest_assert_ok(ferry__gcs_dedup_remember(&d, client_b, 1, 6));
	ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_b, 1, &status), 1);
	ftest_assert_int_eq(status, 6);
	ferry__gcs_dedup_fini(&d);
}

FTEST(dedup_allocation_failures_change_nothing)
{
	struct ferry__gcs_dedup d;
	int32_t status;
	int ret = -ENOMEM;

	for (long n = 0; ret < 0; n++) {
		ferry__gcs_dedup_init(&d, 0);
		ferry__alloc_fail_after(n);
		ret = ferry__gcs_dedup_remember(&d, client_a, 1, 1);
		ferry__alloc_fail_after(-1);
		ftest_assert_int_eq(ferry__gcs_dedup_find(&d, client_a, 1, &status), ret == 0);
		ferry__gcs_dedup_fini(&d);
	}
}

static int put(struct ferry__gcs_state *s, const uint8_t *client, uint64_t seq, uint64_t *lsn)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_PUT};

	op.kv.key = (struct ferry__gcs_slice){"k", 1};
	op.kv.value = (struct ferry__gcs_slice){"v", 1};
	return ferry__gcs_state_apply_request(s, client, seq, &op, lsn);
}

static struct ferry__gcs_state *open_state(const char *dir)
{
	struct ferry__gcs_state_opts o = {0};
	struct ferry__gcs_state *s;

	o.wal_dir = dir;
	ftest_assert_ok(ferry__gcs_state_open(&o, &s));
	return s;
}

FTEST(state_answers_a_resend_with_the_first_result)
{
	struct ferry__gcs_state *s = open_state(NULL);
	struct ferry__gcs_op del = {.type = FERRY__GCS_OP_KV_DELETE};
	uint64_t lsn = 0;

	ftest_assert_int_eq(put(s, client_a, 1, &lsn), 1);
	ftest_assert_int_eq(put(s, client_a, 1, &lsn), 1);
	ftest_assert_uint_eq(lsn, ferry__gcs_state_last_lsn(s));
	ftest_assert_int_eq(put(s, client_a, 2, NULL), 0); /* new request: applied */
	ftest_assert_int_eq(put(s, NULL, 1, NULL), 0);	   /* no client ID: no deduplication */
	/* A failed request is not remembered: its resend is applied. */
	del.kv.key = (struct ferry__gcs_slice){"", 0};
	ftest_assert_errno(ferry__gcs_state_apply_request(s, client_b, 1, &del, NULL), -EINVAL);
	del.kv.key = (struct ferry__gcs_slice){"k", 1};
	ftest_assert_int_eq(ferry__gcs_state_apply_request(s, client_b, 1, &del, NULL), 1);
	ftest_assert_int_eq(ferry__gcs_state_apply_request(s, client_b, 1, &del, NULL), 1);
	ferry__gcs_state_close(s);
}

FTEST(results_survive_a_restart_and_a_snapshot)
{
	char dir[512];
	struct ferry__gcs_state *s;

	snprintf(dir, sizeof(dir), "%s/wal", ftest_tmpdir());
	s = open_state(dir);
	ftest_assert_int_eq(put(s, client_a, 1, NULL), 1);
	ftest_assert_int_eq(put(s, client_a, 2, NULL), 0);
	ferry__gcs_state_close(s);
	s = open_state(dir); /* from the log */
	ftest_assert_int_eq(put(s, client_a, 1, NULL), 1);
	ftest_assert_ok(ferry__gcs_state_snapshot(s));
	ftest_assert_ok(ferry__gcs_state_wait(s));
	ferry__gcs_state_close(s);
	s = open_state(dir); /* from the snapshot */
	ftest_assert_int_eq(put(s, client_a, 1, NULL), 1);
	ftest_assert_int_eq(put(s, client_a, 2, NULL), 0);
	ftest_assert_int_eq(put(s, client_a, 3, NULL), 0);
	ferry__gcs_state_close(s);
}

FTEST(request_done_and_node_died_records_round_trip)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_REQUEST_DONE}, back;
	struct ferry__gcs_buf buf = {0};
	struct ferry__gcs_writer w = {&buf, 0};

	memcpy(op.request_done.client, client_a, 16);
	op.request_done.seq = 1ull << 40;
	op.request_done.status = -EEXIST;
	ferry__gcs_op_encode(&op, &w);
	ftest_assert_ok(w.err);
	ftest_assert_ok(ferry__gcs_op_decode(buf.data, buf.size, &back));
	ftest_assert_mem_eq(back.request_done.client, client_a, 16);
	ftest_assert_uint_eq(back.request_done.seq, 1ull << 40);
	ftest_assert_int_eq(back.request_done.status, -EEXIST);
	ftest_assert_errno(ferry__gcs_op_decode(buf.data, buf.size - 1, &back), -EPROTO);
	buf.size = 0;
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_NODE_DIED};
	op.node_id.bytes[0] = 7;
	ferry__gcs_op_encode(&op, &w);
	ftest_assert_ok(ferry__gcs_op_decode(buf.data, buf.size, &back));
	ftest_assert_uint_eq(back.node_id.bytes[0], 7);
	ferry__gcs_buf_fini(&buf);
}
