/* SPDX-License-Identifier: Apache-2.0 */
/* IDs: randomness, hex round trip and rejection, hashing, task-derived object IDs, fork. */
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/id.h>

#include "ftest.h"

FTEST(random_ids_differ_and_are_not_nil)
{
	struct ferry_object_id a, b;

	ferry_object_id_random(&a);
	ferry_object_id_random(&b);
	ftest_assert_false(ferry_object_id_eq(&a, &b));
	ftest_assert_false(ferry_id_is_nil(a.bytes, sizeof(a.bytes)));
}

FTEST(hex_round_trip)
{
	struct ferry_node_id a, b;
	char hex[FERRY_ID_HEX_MAX];

	ferry_node_id_random(&a);
	ftest_assert_int_eq(ferry_node_id_to_hex(&a, hex, sizeof(hex)), 32);
	ftest_assert_int_eq(strlen(hex), 32);
	ftest_assert_ok(ferry_node_id_from_hex(hex, &b));
	ftest_assert_true(ferry_node_id_eq(&a, &b));
}

FTEST(hex_rejects_bad_text)
{
	struct ferry_task_id id;
	char small[8];

	memset(&id, 0xab, sizeof(id));
	ftest_assert_errno(ferry_task_id_from_hex("abc", &id), -EINVAL);
	ftest_assert_errno(ferry_task_id_from_hex("zz000000000000000000000000000000", &id),
			   -EINVAL);
	ftest_assert_errno(ferry_task_id_from_hex(NULL, &id), -EINVAL);
	ftest_assert_uint_eq(id.bytes[0], 0xab); /* untouched on error */
	ftest_assert_errno(ferry_task_id_to_hex(&id, small, sizeof(small)), -ENOSPC);
	ftest_assert_ok(ferry_task_id_from_hex("00112233445566778899AABBCCDDEEFF", &id));
	ftest_assert_uint_eq(id.bytes[15], 0xff);
}

FTEST(hash_spreads_task_derived_ids)
{
	struct ferry_task_id task;
	struct ferry_object_id a, b;
	uint64_t buckets[64] = {0};

	ferry_task_id_random(&task);
	ferry_object_id_for_task(&task, 1, &a);
	ferry_object_id_for_task(&task, 2, &b);
	ftest_assert_uint_ne(ferry_object_id_hash(&a), ferry_object_id_hash(&b));
	/* IDs differing only in the index bytes must still fill buckets evenly. */
	for (uint32_t i = 1; i <= 6400; i++) {
		ferry_object_id_for_task(&task, i, &a);
		buckets[ferry_object_id_hash(&a) % 64]++;
	}
	for (int i = 0; i < 64; i++) {
		ftest_assert_uint_gt(buckets[i], 50);
		ftest_assert_uint_lt(buckets[i], 150);
	}
}

FTEST(task_and_put_ids_are_deterministic_and_distinct)
{
	struct ferry_task_id task;
	struct ferry_object_id r1, r1_again, p1;

	ferry_task_id_random(&task);
	ferry_object_id_for_task(&task, 1, &r1);
	ferry_object_id_for_task(&task, 1, &r1_again);
	ferry_object_id_for_put(&task, 1, &p1);
	ftest_assert_true(ferry_object_id_eq(&r1, &r1_again));
	ftest_assert_false(ferry_object_id_eq(&r1, &p1));
	ftest_assert_mem_eq(r1.bytes, task.bytes, 16);
	ftest_assert_uint_eq(r1.bytes[16], 1);
	ftest_assert_uint_eq(p1.bytes[19], 0x80);
}

FTEST(forked_child_gets_a_different_sequence)
{
	struct ferry_object_id parent, child;
	int fds[2], status;
	pid_t pid;

	ferry_object_id_random(&parent); /* seed the parent's generator */
	ftest_assert_ok(pipe(fds));
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		ferry_object_id_random(&child);
		_exit(write(fds[1], &child, sizeof(child)) == sizeof(child) ? 0 : 1);
	}
	ferry_object_id_random(&parent);
	ftest_assert_int_eq(read(fds[0], &child, sizeof(child)), sizeof(child));
	waitpid(pid, &status, 0);
	close(fds[0]);
	close(fds[1]);
	ftest_assert_false(ferry_object_id_eq(&parent, &child));
}
