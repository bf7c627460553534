/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job library of ferry-sched-bench (sched_bench.c): a task that makes an input of a given
 * size in its node's store, a task that reads its input (if any) and says which node ran it,
 * and one that takes a given time first. Loaded by the cluster's workers as the job's code.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <ferry/runtime.h>

/* sched_make(size: uint64) -> size bytes, written in place (in the store when large). */
FERRY_FUNCTION(sched_make)
{
	const void *p;
	size_t len;
	uint64_t size = 0;
	void *buf;
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &len) < 0 || len != sizeof(size))
		return ferry_task_error(ctx, "sched_make takes one uint64 size");
	memcpy(&size, p, sizeof(size));
	ret = ferry_task_return_alloc(ctx, 0, size, &buf);
	if (ret < 0)
		return ret;
	memset(buf, 0x5a, size);
	return 0;
}

/* sched_where([input]) -> the 16 bytes of the node that ran it. Its input, when given, is
 * whole in its node's store before the function runs (a task that ran away from it waited for
 * the pull); the function does not read it, so that what is timed is placement and transfer,
 * not the page faults of a first read (the same on every node). */
FERRY_FUNCTION(sched_where)
{
	struct ferry_node_id node;
	const void *p;
	size_t len;
	int ret;

	if (ferry_task_num_args(ctx) > 0 && ferry_task_arg(ctx, 0, &p, &len) < 0)
		return ferry_task_error(ctx, "sched_where: its input is not readable");
	ret = ferry_task_node_id(ctx, &node);
	if (ret < 0)
		return ret;
	return ferry_task_return(ctx, 0, node.bytes, sizeof(node.bytes));
}

/* sched_busy(us: uint64) -> the 16 bytes of the node that ran it, after running @us of time
 * (a sleep: the slot is held, the CPU is not, as a task that waits on I/O). */
FERRY_FUNCTION(sched_busy)
{
	struct ferry_node_id node;
	const void *p;
	size_t len;
	uint64_t us = 0;
	struct timespec ts;
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &len) < 0 || len != sizeof(us))
		return ferry_task_error(ctx, "sched_busy takes one uint64 of microseconds");
	memcpy(&us, p, sizeof(us));
	ts.tv_sec = (time_t)(us / 1000000);
	ts.tv_nsec = (long)(us % 1000000) * 1000;
	nanosleep(&ts, NULL);
	ret = ferry_task_node_id(ctx, &node);
	if (ret < 0)
		return ret;
	return ferry_task_return(ctx, 0, node.bytes, sizeof(node.bytes));
}
