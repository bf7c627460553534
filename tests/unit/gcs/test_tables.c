/* SPDX-License-Identifier: Apache-2.0 */
/* GCS tables: nodes, jobs, workers, the actor and placement group state machines, the bounded
 * logs, validation and allocation failures. */
#include <math.h>

#include "common/alloc.h"
#include "ftest.h"
#include "gcs/tables.h"

static struct ferry__gcs_tables *new_tables(size_t max_events, size_t max_errors)
{
	struct ferry__gcs_tables_opts opts = {max_events, max_errors};
	struct ferry__gcs_tables *t;

	ftest_assert_ok(ferry__gcs_tables_create(&opts, &t));
	return t;
}

static const struct ferry_gcs_resource custom[] = {{"tpu", 4}, {"ssd", 1}};
static const struct ferry__gcs_label labels[] = {{"zone", "a"}, {"rack", NULL}};

static struct ferry__gcs_node sample_node(void)
{
	struct ferry__gcs_node n = {0};

	ferry_node_id_random(&n.id);
	n.address = "10.0.0.1:7000";
	n.total = (struct ferry__gcs_resources){8, 1, 64e9, 2, custom};
	n.nlabels = 2;
	n.labels = labels;
	n.store_capacity_bytes = 1ull << 32;
	n.transports = FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_RDMA;
	n.start_ms = 1000;
	return n;
}

FTEST(node_lifecycle)
{
	struct ferry__gcs_tables *t = new_tables(0, 0);
	struct ferry__gcs_node n = sample_node();
	struct ferry__gcs_heartbeat hb = {n.id, 1100, 6, 1, 32e9, 3};
	const struct ferry__gcs_node *got;

	ftest_assert_int_eq(ferry__gcs_node_register(t, &n, &got), 1);
	ftest_assert_int_eq(got->state, FERRY_GCS_NODE_ALIVE);
	ftest_assert_str_eq(got->address, "10.0.0.1:7000");
	ftest_assert_ptr_null(got->labels[1].value);
	ftest_assert_str_eq(got->total.custom[0].name, "tpu");
	ftest_assert_true(got->avail_cpu == 8 && got->last_heartbeat_ms == 1000);
	ftest_assert_int_eq(ferry__gcs_node_heartbeat(t, &hb, &got), 1);
	ftest_assert_true(got->avail_cpu == 6 && got->queue_length == 3);
	n.address = "10.0.0.1:7001"; /* registering again after a GCS restart */
	ftest_assert_int_eq(ferry__gcs_node_register(t, &n, &got), 0);
	ftest_assert_str_eq(ferry__gcs_node_get(t, &n.id)->address, "10.0.0.1:7001");
	ftest_assert_int_eq(ferry__gcs_node_set_state(t, &n.id, FERRY_GCS_NODE_DRAINING, 5, NULL),
			    1);
	ftest_assert_int_eq(ferry__gcs_node_set_state(t, &n.id, FERRY_GCS_NODE_DRAINING, 6, NULL),
			    0);
	ftest_assert_int_eq(ferry__gcs_node_set_state(t, &n.id, FERRY_GCS_NODE_ALIVE, 7, NULL), 1);
	ftest_assert_int_eq(ferry__gcs_node_set_state(t, &n.id, FERRY_GCS_NODE_DEAD, 8, &got), 1);
	ftest_assert_uint_eq(got->end_ms, 8);
	ftest_assert_errno(ferry__gcs_node_set_state(t, &n.id, FERRY_GCS_NODE_ALIVE, 9, NULL),
			   -EINVAL);
	ftest_assert_errno(ferry__gcs_node_heartbeat(t, &hb, NULL), -ENOENT);
	ftest_assert_errno(ferry__gcs_node_register(t, &n, NULL), -EEXIST);
	ftest_assert_errno(ferry__gcs_node_set_state(t, &hb.id, 7, 9, NULL), -EINVAL);
	ferry_node_id_random(&hb.id);
	ftest_assert_errno(ferry__gcs_node_heartbeat(t, &hb, NULL), -ENOENT);
	ftest_assert_uint_eq(ferry__gcs_tables_count(t, FERRY__GCS_T_NODES), 1);
	ferry__gcs_tables_destroy(t);
}

FTEST(node_fields_are_validated)
{
	static const struct ferry_gcs_resource twice[] = {{"x", 1}, {"x", 2}};
	static const struct ferry__gcs_label same[] = {{"k", "1"}, {"k", "2"}};
	struct ferry__gcs_tables *t = new_tables(0, 0);
	struct ferry__gcs_node n = sample_node(), bad;
	struct ferry__gcs_heartbeat hb = {n.id, 1, NAN, 0, 0, 0};

	bad = n;
	bad.address = NULL;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	bad.total.cpu = NAN;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	bad.total.memory_bytes = -1;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	bad.total.custom = twice;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	bad.labels = same;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	bad.transports = 1u << 7;
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	bad = n;
	memset(&bad.id, 0, sizeof(bad.id));
	ftest_assert_errno(ferry__gcs_node_register(t, &bad, NULL), -EINVAL);
	ftest_assert_uint_eq(ferry__gcs_tables_count(t, FERRY__GCS_T_NODES), 0);
	ftest_assert_int_eq(ferry__gcs_node_register(t, &n, NULL), 1);
	ftest_assert_errno(ferry__gcs_node_heartbeat(t, &hb, NULL), -EINVAL);
	ferry__gcs_tables_destroy(t);
}

FTEST(jobs_and_workers)
{
	struct ferry__gcs_tables *t = new_tables(0, 0);
	struct ferry__gcs_job j = {0};
	struct ferry_gcs_worker_info w = {0}, w2;
	struct ferry__gcs_worker_exit x = {0};
	const struct ferry_gcs_worker_info *got;

	ferry_job_id_random(&j.id);
	j.entrypoint = "python train.py";
	j.start_ms = 10;
	ftest_assert_int_eq(ferry__gcs_job_add(t, &j, NULL), 1);
	ftest_assert_errno(ferry__gcs_job_add(t, &j, NULL), -EEXIST);
	ftest_assert_int_eq(ferry__gcs_job_finish(t, &j.id, 20, NULL), 1);
	ftest_assert_int_eq(ferry__gcs_job_finish(t, &j.id, 30, NULL), 0);
	ftest_assert_int_eq(ferry__gcs_job_get(t, &j.id)->state, FERRY_GCS_JOB_FINISHED);
	ftest_assert_uint_eq(ferry__gcs_job_get(t, &j.id)->end_ms, 20);

	ferry_worker_id_random(&w.id);
	ferry_node_id_random(&w.node);
	w.job = j.id;
	w.pid = 42;
	ftest_assert_int_eq(ferry__gcs_worker_add(t, &w, NULL), 1);
	w2 = w;
	ferry_worker_id_random(&w2.id);
	ftest_assert_int_eq(ferry__gcs_worker_add(t, &w2, NULL), 1);
	x.id = w.id;
	x.time_ms = 50;
	x.exit_type = FERRY_GCS_EXIT_ERROR;
	x.message = "segfault";
	ftest_assert_int_eq(ferry__gcs_worker_dead(t, &x, &got), 1);
	ftest_assert_str_eq(got->exit_message, "segfault");
	ftest_assert_int_eq(ferry__gcs_worker_dead(t, &x, NULL), 0);
	/* The node dies: only the alive worker is touched. */
	ftest_assert_int_eq(ferry__gcs_workers_on_node_died(t, &w.node, 60, NULL, NULL), 1);
	got = ferry__gcs_worker_get(t, &w2.id);
	ftest_assert_int_eq(got->state, FERRY_GCS_WORKER_DEAD);
	ftest_assert_int_eq(got->exit_type, FERRY_GCS_EXIT_NODE_DIED);
	ftest_assert_int_eq(ferry__gcs_worker_get(t, &w.id)->exit_type, FERRY_GCS_EXIT_ERROR);
	ferry_worker_id_random(&w2.id);
	ftest_assert_int_eq(ferry__gcs_worker_add(t, &w2, NULL), 1);
	x.exit_type = 99;
	x.id = w2.id;
	ftest_assert_errno(ferry__gcs_worker_dead(t, &x, NULL), -EINVAL);
	ftest_assert_int_eq(ferry__gcs_worker_get(t, &w2.id)->state, FERRY_GCS_WORKER_ALIVE);
	ferry__gcs_tables_destroy(t);
}

static struct ferry_gcs_actor_info sample_actor(int32_t max_restarts)
{
	struct ferry_gcs_actor_info a = {0};

	ferry_actor_id_random(&a.id);
	ferry_job_id_random(&a.job);
	ferry_worker_id_random(&a.owner);
	a.class_name = "Counter";
	a.state = FERRY_GCS_ACTOR_PENDING;
	a.max_restarts = max_restarts;
	return a;
}

/* Drive a fresh actor to @state along legal moves. */
static struct ferry__gcs_actor_update to(struct ferry_gcs_actor_info *a,
					 enum ferry_gcs_actor_state state)
{
	struct ferry__gcs_actor_update u = {a->id, state, {{0}}, {{0}}, FERRY_GCS_EXIT_NONE, NULL};

	if (state == FERRY_GCS_ACTOR_ALIVE) {
		ferry_node_id_random(&u.node);
		ferry_worker_id_random(&u.worker);
	}
	if (state == FERRY_GCS_ACTOR_DEAD) {
		u.death_cause = FERRY_GCS_EXIT_KILLED;
		u.death_message = "killed by the owner";
	}
	return u;
}

static void reach(struct ferry__gcs_tables *t, struct ferry_gcs_actor_info *a,
		  enum ferry_gcs_actor_state state)
{
	struct ferry__gcs_actor_update u;

	ftest_assert_int_eq(ferry__gcs_actor_register(t, a, NULL), 1);
	if (state == FERRY_GCS_ACTOR_ALIVE || state == FERRY_GCS_ACTOR_RESTARTING) {
		u = to(a, FERRY_GCS_ACTOR_ALIVE);
		ftest_assert_int_eq(ferry__gcs_actor_transition(t, &u, NULL), 1);
	}
	if (state == FERRY_GCS_ACTOR_RESTARTING || state == FERRY_GCS_ACTOR_DEAD) {
		u = to(a, state);
		ftest_assert_int_eq(ferry__gcs_actor_transition(t, &u, NULL), 1);
	}
	ftest_assert_int_eq(ferry__gcs_actor_get(t, &a->id)->state, state);
}

/* Every (from, to) pair against the documented transition table. */
FTEST(actor_state_machine)
{
	/* legal[from][to], states 1..4: pending, alive, restarting, dead; same state = 0. */
	static const int want[5][5] = {
		{0},
		{0, 0, 1, -EINVAL, 1},
		{0, -EINVAL, 0, 1, 1},
		{0, -EINVAL, 1, 0, 1},
		{0, -EINVAL, -EINVAL, -EINVAL, 0},
	};
	struct ferry__gcs_tables *t = new_tables(0, 0);

	for (int from = 1; from <= 4; from++) {
		for (int next = 1; next <= 4; next++) {
			struct ferry_gcs_actor_info a = sample_actor(-1);
			struct ferry__gcs_actor_update u;

			reach(t, &a, (enum ferry_gcs_actor_state)from);
			int ret;

			u = to(&a, (enum ferry_gcs_actor_state)next);
			ret = ferry__gcs_actor_transition(t, &u, NULL);
			if (ret != want[from][next])
				ftest_log("transition %d -> %d", from, next);
			ftest_assert_int_eq(ret, want[from][next]);
		}
	}
	ferry__gcs_tables_destroy(t);
}

FTEST(actor_restart_budget_and_fields)
{
	struct ferry__gcs_tables *t = new_tables(0, 0);
	struct ferry_gcs_actor_info a = sample_actor(1), b = sample_actor(0);
	struct ferry__gcs_actor_update u;
	const struct ferry_gcs_actor_info *got;

	reach(t, &a, FERRY_GCS_ACTOR_RESTARTING);
	u = to(&a, FERRY_GCS_ACTOR_ALIVE);
	ftest_assert_int_eq(ferry__gcs_actor_transition(t, &u, &got), 1);
	ftest_assert_uint_eq(got->num_restarts, 1);
	ftest_assert_true(ferry_node_id_eq(&got->node, &u.node));
	u = to(&a, FERRY_GCS_ACTOR_RESTARTING);
	ftest_assert_errno(ferry__gcs_actor_transition(t, &u, NULL), -EINVAL); /* budget spent */
	u = to(&a, FERRY_GCS_ACTOR_DEAD);
	u.death_cause = FERRY_GCS_EXIT_OUT_OF_RESTARTS;
	ftest_assert_int_eq(ferry__gcs_actor_transition(t, &u, &got), 1);
	ftest_assert_str_eq(got->death_message, "killed by the owner");
	ftest_assert_true(ferry_id_is_nil(got->node.bytes, sizeof(got->node.bytes)));
	/* Alive needs a node and a worker; registering needs PENDING. */
	ftest_assert_int_eq(ferry__gcs_actor_register(t, &b, NULL), 1);
	u = to(&b, FERRY_GCS_ACTOR_ALIVE);
	memset(&u.worker, 0, sizeof(u.worker));
	ftest_assert_errno(ferry__gcs_actor_transition(t, &u, NULL), -EINVAL);
	ftest_assert_errno(ferry__gcs_actor_register(t, &b, NULL), -EEXIST);
	b = sample_actor(0);
	b.state = FERRY_GCS_ACTOR_ALIVE;
	ftest_assert_errno(ferry__gcs_actor_register(t, &b, NULL), -EINVAL);
	ferry_actor_id_random(&u.id);
	ftest_assert_errno(ferry__gcs_actor_transition(t, &u, NULL), -ENOENT);
	ferry__gcs_tables_destroy(t);
}

FTEST(placement_group_states)
{
	static const struct ferry__gcs_bundle bundles[2] = {{{1, 0, 1e9, 0, NULL}, {{0}}},
							    {{0, 1, 0, 2, custom}, {{0}}}};
	struct ferry__gcs_tables *t = new_tables(0, 0);
	struct ferry__gcs_pg g = {0};
	struct ferry_node_id nodes[2];
	struct ferry__gcs_pg_update u = {0};
	const struct ferry__gcs_pg *got;

	ferry_placement_group_id_random(&g.id);
	g.strategy = FERRY_GCS_PG_STRICT_SPREAD;
	g.nbundles = 2;
	g.bundles = bundles;
	g.state = FERRY_GCS_PG_CREATED; /* ignored: a new group is pending */
	ftest_assert_int_eq(ferry__gcs_pg_create(t, &g, &got), 1);
	ftest_assert_int_eq(got->state, FERRY_GCS_PG_PENDING);
	ftest_assert_str_eq(got->bundles[1].resources.custom[1].name, "ssd");
	ftest_assert_errno(ferry__gcs_pg_create(t, &g, NULL), -EEXIST);
	u.id = g.id;
	u.state = FERRY_GCS_PG_CREATED;
	ftest_assert_errno(ferry__gcs_pg_set_state(t, &u, NULL), -EINVAL); /* no nodes */
	ferry_node_id_random(&nodes[0]);
	ferry_node_id_random(&nodes[1]);
	u.nnodes = 2;
	u.nodes = nodes;
	ftest_assert_int_eq(ferry__gcs_pg_set_state(t, &u, &got), 1);
	ftest_assert_true(ferry_node_id_eq(&got->bundles[1].node, &nodes[1]));
	ftest_assert_int_eq(ferry__gcs_pg_set_state(t, &u, NULL), 0);
	ferry_node_id_random(&nodes[1]);
	ftest_assert_errno(ferry__gcs_pg_set_state(t, &u, NULL), -EINVAL); /* elsewhere */
	u = (struct ferry__gcs_pg_update){g.id, FERRY_GCS_PG_PENDING, 0, NULL};
	ftest_assert_errno(ferry__gcs_pg_set_state(t, &u, NULL), -EINVAL);
	u.state = FERRY_GCS_PG_RESCHEDULING;
	ftest_assert_int_eq(ferry__gcs_pg_set_state(t, &u, NULL), 1);
	u.state = FERRY_GCS_PG_REMOVED;
	ftest_assert_int_eq(ferry__gcs_pg_set_state(t, &u, NULL), 1);
	u.state = FERRY_GCS_PG_RESCHEDULING;
	ftest_assert_errno(ferry__gcs_pg_set_state(t, &u, NULL), -EINVAL);
	g.nbundles = 0;
	ferry_placement_group_id_random(&g.id);
	ftest_assert_errno(ferry__gcs_pg_create(t, &g, NULL), -EINVAL);
	ferry__gcs_tables_destroy(t);
}

FTEST(bounded_logs_drop_the_oldest)
{
	struct ferry__gcs_tables *t = new_tables(4, 2);
	struct ferry__gcs_task_event e = {0};
	struct ferry__gcs_error err = {0};
	uint64_t dropped_events, dropped_errors;
	char msg[16];

	ferry_task_id_random(&e.task);
	e.state = FERRY_GCS_TASK_RUNNING;
	for (uint32_t i = 0; i < 10; i++) {
		e.attempt = i;
		ftest_assert_int_eq(ferry__gcs_task_event_add(t, &e), 1);
	}
	ftest_assert_uint_eq(ferry__gcs_task_events_count(t), 4);
	for (uint32_t i = 0; i < 4; i++)
		ftest_assert_uint_eq(ferry__gcs_task_event_at(t, i)->attempt, 6 + i);
	ftest_assert_ptr_null(ferry__gcs_task_event_at(t, 4));
	err.type = "worker_died";
	for (int i = 0; i < 5; i++) {
		snprintf(msg, sizeof(msg), "error %d", i);
		err.message = msg;
		ftest_assert_int_eq(ferry__gcs_error_add(t, &err, NULL), 1);
	}
	ftest_assert_str_eq(ferry__gcs_error_at(t, 0)->message, "error 3");
	ftest_assert_str_eq(ferry__gcs_error_at(t, 1)->message, "error 4");
	ferry__gcs_logs_dropped(t, &dropped_events, &dropped_errors);
	ftest_assert_uint_eq(dropped_events, 6);
	ftest_assert_uint_eq(dropped_errors, 3);
	err.type = NULL;
	ftest_assert_errno(ferry__gcs_error_add(t, &err, NULL), -EINVAL);
	e.state = 0;
	ftest_assert_errno(ferry__gcs_task_event_add(t, &e), -EINVAL);
	ferry__gcs_tables_destroy(t);
}

FTEST(restore_puts_records_back_exactly)
{
	struct ferry__gcs_tables *t = new_tables(0, 0), *copy = new_tables(0, 0);
	struct ferry_gcs_actor_info a = sample_actor(3);
	struct ferry__gcs_node n = sample_node();
	size_t cursor = 0;
	const void *rec;

	reach(t, &a, FERRY_GCS_ACTOR_RESTARTING);
	ftest_assert_int_eq(ferry__gcs_node_register(t, &n, NULL), 1);
	for (int table = 0; table < FERRY__GCS_T_COUNT; table++) {
		cursor = 0;
		while ((rec = ferry__gcs_tables_next(t, (enum ferry__gcs_table)table, &cursor)))
			ftest_assert_int_eq(
				ferry__gcs_tables_restore(copy, (enum ferry__gcs_table)table, rec),
				1);
	}
	ftest_assert_errno(
		ferry__gcs_tables_restore(copy, FERRY__GCS_T_NODES, ferry__gcs_node_get(t, &n.id)),
		-EEXIST);
	ftest_assert_int_eq(ferry__gcs_actor_get(copy, &a.id)->state, FERRY_GCS_ACTOR_RESTARTING);
	ftest_assert_uint_eq(ferry__gcs_actor_get(copy, &a.id)->num_restarts, 1);
	ftest_assert_str_eq(ferry__gcs_node_get(copy, &n.id)->labels[0].value, "a");
	ferry__gcs_tables_destroy(copy);
	ferry__gcs_tables_destroy(t);
}

/* Each mutation that needs memory, failed at every allocation: -ENOMEM and no change. */
FTEST(allocation_failures_change_nothing)
{
	struct ferry__gcs_tables *t = new_tables(2, 2);
	struct ferry__gcs_node n = sample_node();
	struct ferry_gcs_actor_info a = sample_actor(-1);
	struct ferry__gcs_actor_update u;
	struct ferry__gcs_error err = {{{0}}, 1, "oom", "message"};
	struct ferry__gcs_task_event e = {0};
	int ret;

	ferry_task_id_random(&e.task);
	e.state = FERRY_GCS_TASK_FINISHED;
	for (long i = 0;; i++) {
		ferry__alloc_fail_after(i);
		ret = ferry__gcs_node_register(t, &n, NULL);
		ferry__alloc_fail_after(-1);
		if (ret == 1)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ftest_assert_ptr_null(ferry__gcs_node_get(t, &n.id));
	}
	reach(t, &a, FERRY_GCS_ACTOR_ALIVE);
	u = to(&a, FERRY_GCS_ACTOR_DEAD);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(ferry__gcs_actor_transition(t, &u, NULL), -ENOMEM);
	ftest_assert_int_eq(ferry__gcs_actor_get(t, &a.id)->state, FERRY_GCS_ACTOR_ALIVE);
	for (long i = 0;; i++) {
		ferry__alloc_fail_after(i);
		ret = ferry__gcs_error_add(t, &err, NULL);
		ferry__alloc_fail_after(-1);
		if (ret == 1)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ftest_assert_uint_eq(ferry__gcs_errors_count(t), 0);
	}
	ferry__alloc_fail_after(0);
	ftest_assert_errno(ferry__gcs_task_event_add(t, &e), -ENOMEM);
	ftest_assert_uint_eq(ferry__gcs_task_events_count(t), 0);
	ferry__gcs_tables_destroy(t);
}
