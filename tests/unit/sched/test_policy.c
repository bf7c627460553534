/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The placement policy (sched/policy.h) as a scheduler level uses it: children report load,
 * tasks are decided and committed, and the choices are the ones the policy promises (inputs
 * pull a task to their node, packing up to the threshold then spreading, the shortest queue
 * when all are full, affinity, infeasible tasks refused), in bounded probes at 10,000 children.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "ftest.h"
#include "sched/policy.h"

#define CPU(n) ((int64_t)(n)*FERRY__SCHED_UNIT)

/* A node's report: @cpus in total, @free of them free, and @gpus GPUs all free. */
static struct ferry__sched_load node_load(uint64_t version, int cpus, int free, int gpus)
{
	struct ferry__sched_load l;

	memset(&l, 0, sizeof(l));
	l.version = version;
	l.total[FERRY__SCHED_CPU] = l.total_max[FERRY__SCHED_CPU] = CPU(cpus);
	l.avail[FERRY__SCHED_CPU] = l.avail_max[FERRY__SCHED_CPU] = CPU(free);
	l.total[FERRY__SCHED_GPU] = l.total_max[FERRY__SCHED_GPU] = CPU(gpus);
	l.avail[FERRY__SCHED_GPU] = l.avail_max[FERRY__SCHED_GPU] = CPU(gpus);
	return l;
}

/* A level of @n nodes of @cpus CPUs, all free; node number i is child i. */
static struct ferry__sched_level *level_of(uint32_t n, int cpus, double threshold)
{
	struct ferry__sched_level_opts o = {.pack_threshold = threshold};
	struct ferry__sched_level *l = NULL;

	ftest_assert_ok(ferry__sched_level_create(&o, &l));
	for (uint32_t i = 0; i < n; i++) {
		uint32_t c;
		struct ferry__sched_load load = node_load(1, cpus, cpus, 0);

		ftest_assert_ok(ferry__sched_child_add(l, &c));
		ftest_assert_uint_eq(c, i);
		ftest_assert_ok(ferry__sched_child_report(l, c, &load));
		ftest_assert_ok(ferry__sched_level_map_node(l, i, c));
	}
	return l;
}

static struct ferry__sched_task cpu_task(int cpus)
{
	struct ferry__sched_task t;

	memset(&t, 0, sizeof(t));
	t.ndemand = 1;
	t.demand[0].kind = FERRY__SCHED_CPU;
	t.demand[0].amount = CPU(cpus);
	return t;
}

/* @child's view, for asserts. */
static struct ferry__sched_load view(const struct ferry__sched_level *l, uint32_t child)
{
	struct ferry__sched_load out;

	ftest_assert_ok(ferry__sched_child_load(l, child, &out));
	return out;
}

/* Decide and commit; the child chosen. */
static uint32_t place(struct ferry__sched_level *l, const struct ferry__sched_task *t)
{
	struct ferry__sched_decision d;

	ftest_assert_ok(ferry__sched_decide(l, t, &d));
	ferry__sched_commit(l, t, &d);
	return d.child;
}

FTEST(a_task_goes_to_the_node_holding_its_large_input)
{
	struct ferry__sched_level *l = level_of(8, 4, 0.5);
	uint32_t where = 5;
	struct ferry__sched_input in = {
		.size_bytes = 100u << 20, .nlocations = 1, .locations = &where};
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	t.ninputs = 1;
	t.inputs = &in;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 5);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_RUNS_NOW);
	ftest_assert_uint_eq(d.local_bytes, 100u << 20);
	ftest_assert_uint_eq(d.est_wait_ns, 0);
	ferry__sched_level_destroy(l);
}

FTEST(a_busy_holder_loses_a_small_input_but_keeps_a_large_one)
{
	struct ferry__sched_level *l = level_of(4, 4, 0.5);
	struct ferry__sched_load busy = node_load(2, 4, 0, 0);
	uint32_t where = 2;
	struct ferry__sched_input in = {.size_bytes = 1000, .nlocations = 1, .locations = &where};
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	busy.queue_len = 10;
	busy.mean_task_ns = 1000000; /* 10 ms queued */
	ftest_assert_ok(ferry__sched_child_report(l, 2, &busy));
	t.ninputs = 1;
	t.inputs = &in;
	/* 1000 bytes move in ~1 us: a free node beats 10 ms of queue. */
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_ne(d.child, 2);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_RUNS_NOW);
	/* 1 GiB takes ~0.86 s at the default 1.25 GB/s: waiting for the holder wins. */
	in.size_bytes = 1ull << 30;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 2);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	/* 11 tasks (ten queued and this one) of 1 ms on 4 CPUs: 2.75 ms. */
	ftest_assert_uint_eq(d.est_wait_ns, 2750000);
	ferry__sched_level_destroy(l);
}

FTEST(default_packs_up_to_the_threshold_then_spreads)
{
	struct ferry__sched_level *l = level_of(4, 4, 0.5);
	struct ferry__sched_task t = cpu_task(1);
	uint32_t per_child[4] = {0};

	/* Half of each node's 4 CPUs: the first node takes two, then the next, ... */
	ftest_assert_uint_eq(place(l, &t), 0);
	ftest_assert_uint_eq(place(l, &t), 0);
	for (int i = 0; i < 6; i++)
		per_child[place(l, &t)]++;
	ftest_assert_uint_eq(per_child[0], 0);
	ftest_assert_uint_eq(per_child[1], 2);
	ftest_assert_uint_eq(per_child[2], 2);
	ftest_assert_uint_eq(per_child[3], 2);
	/* Every node is at the threshold now: the rest spread, one per node, emptiest first. */
	memset(per_child, 0, sizeof(per_child));
	for (int i = 0; i < 8; i++)
		per_child[place(l, &t)]++;
	for (int i = 0; i < 4; i++)
		ftest_assert_uint_eq(per_child[i], 2);
	ferry__sched_level_destroy(l);
}

FTEST(spread_goes_round_robin_and_ignores_inputs)
{
	struct ferry__sched_level *l = level_of(4, 8, 0.5);
	uint32_t where = 0;
	struct ferry__sched_input in = {
		.size_bytes = 1u << 30, .nlocations = 1, .locations = &where};
	struct ferry__sched_task t = cpu_task(1);
	uint32_t per_child[4] = {0};

	t.strategy = FERRY__SCHED_SPREAD;
	t.ninputs = 1;
	t.inputs = &in;
	for (int i = 0; i < 12; i++)
		per_child[place(l, &t)]++;
	for (int i = 0; i < 4; i++)
		ftest_assert_uint_eq(per_child[i], 3);
	ferry__sched_level_destroy(l);
}

FTEST(when_all_are_full_the_shortest_queue_wins)
{
	struct ferry__sched_level *l = level_of(3, 2, 0.5);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;
	uint32_t queued[3] = {5, 1, 3};

	for (uint32_t i = 0; i < 3; i++) {
		struct ferry__sched_load full = node_load(2, 2, 0, 0);
		full.queue_len = queued[i];
		ftest_assert_ok(ferry__sched_child_report(l, i, &full));
	}
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 1);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	/* Commits lengthen queues between reports, so a burst evens them out. */
	ferry__sched_commit(l, &t, &d);	       /* 5, 2, 3 */
	ftest_assert_uint_eq(place(l, &t), 1); /* 5, 3, 3 */
	ftest_assert_uint_ne(place(l, &t), 0);
	ftest_assert_uint_eq(view(l, 0).queue_len, 5);
	ferry__sched_level_destroy(l);
}

FTEST(a_gpu_task_finds_the_one_gpu_node_among_thousands)
{
	struct ferry__sched_level *l = level_of(5000, 8, 0.5);
	struct ferry__sched_load gpu_node = node_load(2, 8, 8, 2);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	ftest_assert_ok(ferry__sched_child_report(l, 4321, &gpu_node));
	t.ndemand = 2;
	t.demand[1].kind = FERRY__SCHED_GPU;
	t.demand[1].amount = CPU(1);
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 4321);
	ftest_assert_uint_le(d.probes, 2);
	/* Three GPUs is more than any node has: infeasible, not queued. */
	t.demand[1].amount = CPU(3);
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -ENOSPC);
	ferry__sched_level_destroy(l);
}

/* Custom kinds live in a child's full report, kept only for children that have some: a task
 * asking for one finds its holder, takes from it, and loses it when a report drops the kind. */
FTEST(a_custom_kind_is_found_taken_and_dropped)
{
	const uint32_t accel = 40; /* a custom kind's number */
	struct ferry__sched_level *l = level_of(3000, 8, 0.5);
	struct ferry__sched_load load = node_load(2, 8, 8, 0);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	load.total[accel] = load.total_max[accel] = CPU(2);
	load.avail[accel] = load.avail_max[accel] = CPU(2);
	ftest_assert_ok(ferry__sched_child_report(l, 1234, &load));
	ftest_assert_int_eq(view(l, 1234).total[accel], CPU(2));
	ftest_assert_int_eq(view(l, 1235).total[accel], 0);
	t.ndemand = 2;
	t.demand[1].kind = accel;
	t.demand[1].amount = CPU(1);
	ftest_assert_uint_eq(place(l, &t), 1234);
	ftest_assert_int_eq(view(l, 1234).avail[accel], CPU(1));
	ftest_assert_int_eq(view(l, 1234).avail[FERRY__SCHED_CPU], CPU(7));
	ftest_assert_uint_eq(place(l, &t), 1234);
	/* Both taken: the next one queues there, the only child that could ever run it. */
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 1234);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	/* A report without the kind: nobody has it any more. */
	load = node_load(3, 8, 8, 0);
	ftest_assert_ok(ferry__sched_child_report(l, 1234, &load));
	ftest_assert_int_eq(view(l, 1234).total[accel], 0);
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -ENOSPC);
	ferry__sched_level_destroy(l);
}

FTEST(fractional_amounts_add_up_exactly)
{
	struct ferry__sched_level *l = level_of(1, 1, 1.0);
	struct ferry__sched_task t = cpu_task(0);
	struct ferry__sched_decision d;

	t.demand[0].amount = FERRY__SCHED_UNIT / 10; /* 0.1 CPU */
	for (int i = 0; i < 10; i++) {
		ftest_assert_ok(ferry__sched_decide(l, &t, &d));
		ftest_assert_int_eq(d.verdict, FERRY__SCHED_RUNS_NOW);
		ferry__sched_commit(l, &t, &d);
	}
	ftest_assert_int_eq(view(l, 0).avail[FERRY__SCHED_CPU], 0);
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	ferry__sched_level_destroy(l);
}

FTEST(affinity_hard_and_soft)
{
	struct ferry__sched_level *l = level_of(4, 2, 0.5);
	struct ferry__sched_load full = node_load(2, 2, 0, 0);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	t.strategy = FERRY__SCHED_NODE_AFFINITY;
	t.affinity_node = 3;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 3);
	/* Full: a hard affinity queues there, a soft one goes elsewhere. */
	ftest_assert_ok(ferry__sched_child_report(l, 3, &full));
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 3);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	t.affinity_soft = true;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_ne(d.child, 3);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_RUNS_NOW);
	/* Dead or unknown: hard fails, soft goes elsewhere. */
	ftest_assert_ok(ferry__sched_child_dead(l, 3));
	t.affinity_soft = false;
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EHOSTUNREACH);
	t.affinity_node = 999;
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EHOSTUNREACH);
	t.affinity_soft = true;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_lt(d.child, 3);
	ferry__sched_level_destroy(l);
}

FTEST(dead_children_take_nothing_and_stale_reports_are_ignored)
{
	struct ferry__sched_level *l = level_of(2, 4, 0.5);
	struct ferry__sched_load old = node_load(1, 4, 0, 0), late = node_load(9, 4, 4, 0);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	/* Version 1 again (out of order): ignored, child 0 still has 4 free. */
	ftest_assert_ok(ferry__sched_child_report(l, 0, &old));
	ftest_assert_int_eq(view(l, 0).avail[FERRY__SCHED_CPU], CPU(4));
	ftest_assert_ok(ferry__sched_child_dead(l, 0));
	ftest_assert_errno(ferry__sched_child_report(l, 0, &late), -ESRCH);
	for (int i = 0; i < 6; i++)
		ftest_assert_uint_eq(place(l, &t), 1);
	ftest_assert_ok(ferry__sched_child_dead(l, 1));
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -ENOSPC);
	ferry__sched_level_destroy(l);
}

/* A revived child (a group scheduler back from silence) lives again from its next report, on
 * the same child number; a revive of a live child changes nothing. */
FTEST(a_revived_child_takes_tasks_again)
{
	struct ferry__sched_level *l = level_of(1, 4, 0.5);
	struct ferry__sched_load back = node_load(9, 4, 4, 0);
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;

	ftest_assert_ok(ferry__sched_child_revive(l, 0));
	ftest_assert_int_eq(view(l, 0).avail[FERRY__SCHED_CPU], CPU(4));
	ftest_assert_ok(ferry__sched_child_dead(l, 0));
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -ENOSPC);
	ftest_assert_ok(ferry__sched_child_revive(l, 0));
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -ENOSPC); /* until it reports */
	ftest_assert_ok(ferry__sched_child_report(l, 0, &back));
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 0);
	ftest_assert_errno(ferry__sched_child_revive(l, 1), -EINVAL);
	ferry__sched_level_destroy(l);
}

FTEST(bad_reports_and_tasks_are_refused)
{
	struct ferry__sched_level *l = level_of(1, 4, 0.5);
	struct ferry__sched_load bad = node_load(5, 4, 5, 0); /* more free than it has */
	struct ferry__sched_task t = cpu_task(1);
	struct ferry__sched_decision d;
	struct ferry__sched_level_opts o = {.pack_threshold = 1.5};
	struct ferry__sched_level *none = NULL;

	ftest_assert_errno(ferry__sched_child_report(l, 0, &bad), -EINVAL);
	bad = node_load(5, 4, 4, 0);
	bad.avail[FERRY__SCHED_GPU] = -1;
	ftest_assert_errno(ferry__sched_child_report(l, 0, &bad), -EINVAL);
	ftest_assert_errno(ferry__sched_child_report(l, 7, &bad), -EINVAL);
	ftest_assert_errno(ferry__sched_level_map_node(l, 3, 7), -EINVAL);
	t.demand[0].amount = 0;
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EINVAL);
	t = cpu_task(1);
	t.ndemand = 2; /* CPU twice */
	t.demand[1] = t.demand[0];
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EINVAL);
	t.demand[1].kind = FERRY__SCHED_KINDS;
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EINVAL);
	t = cpu_task(1);
	t.ninputs = 1; /* and no array */
	ftest_assert_errno(ferry__sched_decide(l, &t, &d), -EINVAL);
	ftest_assert_errno(ferry__sched_level_create(&o, &none), -EINVAL);
	ftest_assert_ptr_null(none);
	ferry__sched_level_destroy(l);
}

FTEST(a_group_summary_keeps_what_fits_in_one_node)
{
	struct ferry__sched_level *group = level_of(3, 4, 0.5), *top = NULL;
	struct ferry__sched_load sum, busy = node_load(2, 4, 1, 0);
	struct ferry__sched_task t = cpu_task(2);
	struct ferry__sched_decision d;
	uint32_t c;

	busy.queue_len = 4;
	busy.mean_task_ns = 3000;
	for (uint32_t i = 0; i < 3; i++)
		ftest_assert_ok(ferry__sched_child_report(group, i, &busy));
	ferry__sched_level_summary(group, 7, &sum);
	ftest_assert_uint_eq(sum.version, 7);
	ftest_assert_int_eq(sum.total[FERRY__SCHED_CPU], CPU(12));
	ftest_assert_int_eq(sum.avail[FERRY__SCHED_CPU], CPU(3));
	ftest_assert_int_eq(sum.avail_max[FERRY__SCHED_CPU], CPU(1));
	ftest_assert_int_eq(sum.total_max[FERRY__SCHED_CPU], CPU(4));
	ftest_assert_uint_eq(sum.queue_len, 12);
	ftest_assert_uint_eq(sum.mean_task_ns, 3000);
	/* Above: 3 CPUs are free in the group, but no node has 2: the task queues there. */
	ftest_assert_ok(ferry__sched_level_create(NULL, &top));
	ftest_assert_ok(ferry__sched_child_add(top, &c));
	ftest_assert_ok(ferry__sched_child_report(top, c, &sum));
	ftest_assert_ok(ferry__sched_decide(top, &t, &d));
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	ferry__sched_level_destroy(top);
	ferry__sched_level_destroy(group);
}

FTEST(a_decision_at_ten_thousand_children_probes_a_bounded_few)
{
	struct ferry__sched_level *l = level_of(10000, 8, 0.5);
	struct ferry__sched_task t = cpu_task(1);
	uint32_t holders[3] = {17, 4242, 9999};
	struct ferry__sched_input in[2] = {
		{.size_bytes = 1u << 20, .nlocations = 2, .locations = holders},
		{.size_bytes = 1u << 10, .nlocations = 1, .locations = holders + 2},
	};
	struct ferry__sched_decision d;

	/* Fill every node to the brim, then decide: queues everywhere, still bounded. */
	for (int i = 0; i < 10000 * 8 + 500; i++) {
		ftest_assert_ok(ferry__sched_decide(l, &t, &d));
		ftest_assert_uint_le(d.probes, 2 * FERRY__SCHED_PROBES);
		ferry__sched_commit(l, &t, &d);
	}
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	t.ninputs = 2;
	t.inputs = in;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_le(d.probes, 2 * FERRY__SCHED_PROBES + 3);
	ferry__sched_level_destroy(l);
}

FTEST(allocation_failures_leave_the_level_usable)
{
	struct ferry__sched_level *l = NULL;
	struct ferry__sched_load load = node_load(1, 4, 4, 1);
	long live = ferry__alloc_live();
	int failed = 0;

	ftest_assert_ok(ferry__sched_level_create(NULL, &l));
	for (uint32_t i = 0; i < 600; i++) {
		uint32_t c;
		int ret;

		/* Growing takes 10 allocations (children, and three arrays for the wait list and
		 * each of two kinds' lists): each is failed in turn until one growth gets through. */
		ferry__alloc_fail_after(i % 12);
		ret = ferry__sched_child_add(l, &c);
		if (ret == 0)
			ret = ferry__sched_child_report(l, c, &load);
		if (ret == 0)
			ret = ferry__sched_level_map_node(l, i * 7, c);
		ferry__alloc_fail_after(-1);
		if (ret < 0) {
			ftest_assert_errno(ret, -ENOMEM);
			failed++;
		}
	}
	ftest_assert_int_gt(failed, 0);
	ftest_assert_uint_gt(ferry__sched_level_children(l), 256);
	struct ferry__sched_task t = cpu_task(1);
	ftest_assert_uint_lt(place(l, &t), ferry__sched_level_children(l));
	ferry__sched_level_destroy(l);
	ftest_assert_int_eq(ferry__alloc_live(), live);
}

FTEST(an_excluded_child_is_never_chosen)
{
	struct ferry__sched_level *l = level_of(3, 4, 0.5);
	struct ferry__sched_task t = cpu_task(2);
	struct ferry__sched_decision d;
	struct ferry__sched_input in = {.size_bytes = 512u << 20, .nlocations = 1};
	uint32_t holder = 0;

	/* A large input on child 0 draws the task there, unless 0 sent it up. */
	in.locations = &holder;
	t.inputs = &in;
	t.ninputs = 1;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 0);
	t.exclude = true;
	t.excluded_child = 0;
	for (int i = 0; i < 8; i++)
		ftest_assert_uint_ne(place(l, &t), 0);
	/* All full now: the shortest queue, still not child 0 (its queue is the shortest). */
	for (uint32_t i = 1; i < 3; i++) {
		struct ferry__sched_load full = node_load(2, 4, 0, 0);

		full.queue_len = 5;
		ftest_assert_ok(ferry__sched_child_report(l, i, &full));
	}
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_ne(d.child, 0);
	ftest_assert_int_eq(d.verdict, FERRY__SCHED_QUEUES);
	/* Only the excluded child could ever run it: -ENOSPC (the sender keeps it). */
	t.demand[0].amount = CPU(8);
	{
		struct ferry__sched_load big = node_load(3, 8, 8, 0);

		ftest_assert_ok(ferry__sched_child_report(l, 0, &big));
	}
	ftest_assert_int_eq(ferry__sched_decide(l, &t, &d), -ENOSPC);
	t.exclude = false;
	ftest_assert_ok(ferry__sched_decide(l, &t, &d));
	ftest_assert_uint_eq(d.child, 0);
	ferry__sched_level_destroy(l);
}
