/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS state over the WAL: a script of mutations touching every table, replayed after a
 * clean close, after a crash and after a snapshot, must give byte-identical canonical dumps;
 * change reports and cascades; failed ops are not logged; every allocation failure of apply and
 * open leaves the state unchanged; the mutation record codec round-trips and rejects malformed
 * records.
 */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "ftest.h"
#include "gcs/state.h"
#include "record_util.h"

#define MAX_OPS 80

static struct ferry_node_id n1 = {{1, 1}}, n2 = {{1, 2}}, n3 = {{1, 3}};
static struct ferry_worker_id w1 = {{2, 1}}, w2 = {{2, 2}}, w3 = {{2, 3}}, driver = {{2, 9}};
static struct ferry_job_id job1 = {{3, 1}};
static struct ferry_actor_id a1 = {{4, 1}}, a2 = {{4, 2}};
static struct ferry_placement_group_id p1 = {{5, 1}};
static struct ferry_object_id o1 = {{6, 1}}, o2 = {{6, 2}}, o3 = {{6, 3}}, o4 = {{6, 4}},
			      o5 = {{6, 5}};
static const struct ferry_gcs_resource custom[] = {{"tpu", 2}};
static const struct ferry__gcs_label labels[] = {{"zone", "b"}};
static const struct ferry__gcs_bundle bundles[2] = {{{1, 0, 0, 0, NULL}, {{0}}},
						    {{2, 0, 1e6, 1, custom}, {{0}}}};
static struct ferry_node_id placed[2] = {{{1, 2}}, {{1, 3}}};
static struct ferry_node_id two_nodes[2] = {{{1, 1}}, {{1, 2}}};
/* o1's copies' places: n2's unknown */
static struct ferry_gcs_object_place two_places[2] = {{4096, 5, 0x4c}, {0, 0, 0}};

/* Where @s has @id's copy on @node: it must be at @offset in allocation @alloc, with @check. */
static void assert_place(struct ferry__gcs_state *s, const struct ferry_object_id *id,
			 const struct ferry_node_id *node, uint64_t offset, uint64_t alloc,
			 uint64_t check)
{
	const struct ferry__objdir_entry *e = ferry__objdir_get(ferry__gcs_state_objdir(s), id);
	const struct ferry__objdir_loc *l;

	ftest_assert_ptr_notnull(e);
	for (l = e->locations; l && !ferry_node_id_eq(&l->node, node); l = l->obj_next)
		;
	ftest_assert_ptr_notnull(l);
	ftest_assert_uint_eq(l->place.offset, offset);
	ftest_assert_uint_eq(l->place.alloc, alloc);
	ftest_assert_uint_eq(l->place.check, check);
}

struct script {
	struct ferry__gcs_op ops[MAX_OPS]; /* in order */
	int n;				   /* how many */
};

static struct ferry__gcs_op *next_op(struct script *sc, enum ferry__gcs_op_type type)
{
	struct ferry__gcs_op *op = &sc->ops[sc->n++];

	ftest_assert_int_le(sc->n, MAX_OPS);
	memset(op, 0, sizeof(*op));
	op->type = type;
	return op;
}

static void add_node(struct script *sc, const struct ferry_node_id *id, const char *address)
{
	struct ferry__gcs_op *op = next_op(sc, FERRY__GCS_OP_NODE_REGISTER);

	op->node.id = *id;
	op->node.address = address;
	op->node.total = (struct ferry__gcs_resources){4, 0, 8e9, 1, custom};
	op->node.nlabels = 1;
	op->node.labels = labels;
	op->node.transports = FERRY_GCS_TRANSPORT_TCP;
	op->node.start_ms = 100;
}

static void add_worker(struct script *sc, const struct ferry_worker_id *id,
		       const struct ferry_node_id *node)
{
	struct ferry__gcs_op *op = next_op(sc, FERRY__GCS_OP_WORKER_ADD);

	op->worker.id = *id;
	op->worker.node = *node;
	op->worker.job = job1;
	op->worker.pid = 1000 + id->bytes[1];
	op->worker.address = "unix:/run/w";
}

static void add_object(struct script *sc, const struct ferry_object_id *id,
		       const struct ferry_worker_id *owner, const struct ferry_node_id *node,
		       uint32_t nloc, const struct ferry_node_id *locs)
{
	struct ferry__gcs_op *op = next_op(sc, FERRY__GCS_OP_OBJ_ADD);

	op->obj.id = *id;
	op->obj.owner_worker = *owner;
	op->obj.owner_node = *node;
	op->obj.size_bytes = 4096;
	op->obj.metadata_bytes = 24;
	op->obj.nlocations = nloc;
	op->obj.locations = locs;
}

static void actor_to(struct script *sc, const struct ferry_actor_id *id,
		     enum ferry_gcs_actor_state state)
{
	struct ferry__gcs_op *op = next_op(sc, FERRY__GCS_OP_ACTOR_UPDATE);

	op->actor_update.id = *id;
	op->actor_update.state = state;
	if (state == FERRY_GCS_ACTOR_ALIVE) {
		op->actor_update.node = n2;
		op->actor_update.worker = w2;
	}
	if (state == FERRY_GCS_ACTOR_DEAD) {
		op->actor_update.death_cause = FERRY_GCS_EXIT_KILLED;
		op->actor_update.death_message = "ray.kill";
	}
}

static void kv(struct script *sc, enum ferry__gcs_op_type type, const char *ns, const char *key,
	       const char *value, bool overwrite)
{
	struct ferry__gcs_op *op = next_op(sc, type);

	op->kv.ns = (struct ferry__gcs_slice){ns, strlen(ns)};
	op->kv.key = (struct ferry__gcs_slice){key, strlen(key)};
	op->kv.value = (struct ferry__gcs_slice){value, value ? strlen(value) : 0};
	op->kv.overwrite = overwrite;
}

/* Part one: registrations, state machines, logs, KV, objects. */
static void script_one(struct script *sc)
{
	struct ferry__gcs_op *op;

	add_node(sc, &n1, "10.0.0.1:1");
	add_node(sc, &n2, "10.0.0.2:1");
	add_node(sc, &n3, "10.0.0.3:1");
	op = next_op(sc, FERRY__GCS_OP_JOB_ADD);
	op->job.id = job1;
	op->job.driver_node = n1;
	op->job.entrypoint = "./train --epochs 3";
	op->job.start_ms = 5;
	add_worker(sc, &w1, &n1);
	add_worker(sc, &w2, &n2);
	add_worker(sc, &w3, &n1);
	for (int i = 0; i < 2; i++) {
		op = next_op(sc, FERRY__GCS_OP_ACTOR_REGISTER);
		op->actor.id = i ? a2 : a1;
		op->actor.job = job1;
		op->actor.owner = w1;
		op->actor.name = i ? NULL : "counter";
		op->actor.class_name = "Counter";
		op->actor.state = FERRY_GCS_ACTOR_PENDING;
		op->actor.max_restarts = 2;
	}
	actor_to(sc, &a1, FERRY_GCS_ACTOR_ALIVE);
	actor_to(sc, &a1, FERRY_GCS_ACTOR_RESTARTING);
	actor_to(sc, &a1, FERRY_GCS_ACTOR_ALIVE);
	actor_to(sc, &a2, FERRY_GCS_ACTOR_DEAD);
	op = next_op(sc, FERRY__GCS_OP_PG_CREATE);
	op->pg = (struct ferry__gcs_pg){p1, job1, "pg", FERRY_GCS_PG_SPREAD, 0, 2, bundles};
	op = next_op(sc, FERRY__GCS_OP_PG_UPDATE);
	op->pg_update = (struct ferry__gcs_pg_update){p1, FERRY_GCS_PG_CREATED, 2, placed};
	for (uint32_t i = 0; i < 5; i++) {
		op = next_op(sc, FERRY__GCS_OP_TASK_EVENT);
		op->task_event.task.bytes[0] = 7;
		op->task_event.task.bytes[1] = (uint8_t)i;
		op->task_event.job = job1;
		op->task_event.state = FERRY_GCS_TASK_SUBMITTED + i % 5;
		op->task_event.time_ms = 10 + i;
	}
	op = next_op(sc, FERRY__GCS_OP_ERROR);
	op->error = (struct ferry__gcs_error){job1, 20, "task_failed", "division by zero"};
	kv(sc, FERRY__GCS_OP_KV_PUT, "fn", "fn/add", "code1", false);
	kv(sc, FERRY__GCS_OP_KV_PUT, "fn", "fn/mul", "code2", false);
	kv(sc, FERRY__GCS_OP_KV_PUT, "fn", "fn/add", "code3", true);
	kv(sc, FERRY__GCS_OP_KV_PUT, "cfg", "x", "1", false);
	kv(sc, FERRY__GCS_OP_KV_PUT, "cfg", "tmp/1", "", false);
	kv(sc, FERRY__GCS_OP_KV_PUT, "cfg", "tmp/2", "b", false);
	kv(sc, FERRY__GCS_OP_KV_DELETE, "fn", "fn/mul", NULL, false);
	kv(sc, FERRY__GCS_OP_KV_DELETE_PREFIX, "cfg", "tmp/", NULL, false);
	add_object(sc, &o1, &w1, &n1, 2, two_nodes);
	sc->ops[sc->n - 1].obj.places = two_places;
	add_object(sc, &o2, &w2, &n2, 1, &n1);
	add_object(sc, &o3, &w2, &n2, 0, NULL);
	add_object(sc, &o4, &driver, &n3, 1, &n3);
	add_object(sc, &o5, &w2, &n2, 1, &n1);
	op = next_op(sc, FERRY__GCS_OP_OBJ_ADD_LOCATION);
	op->obj_location.id = o3;
	op->obj_location.node = n3;
	op->obj_location.size_bytes = 4096;
	op->obj_location.metadata_bytes = 40; /* the copy's node knows the metadata size */
	op->obj_location.place = (struct ferry_gcs_object_place){1 << 20, 77, 0x77c};
	op = next_op(sc, FERRY__GCS_OP_OBJ_ADD_LOCATION); /* listed again: a new place */
	op->obj_location.id = o3;
	op->obj_location.node = n3;
	op->obj_location.place = (struct ferry_gcs_object_place){2 << 20, 78, 0x78c};
	op = next_op(sc, FERRY__GCS_OP_OBJ_SPILLED);
	op->obj_spilled.id = o5;
	op->obj_spilled.url = "file:///spill/o5";
	op = next_op(sc, FERRY__GCS_OP_OBJ_REMOVE_LOCATION);
	op->obj_location.id = o1;
	op->obj_location.node = n2;
}

/* Part two: heartbeats, deaths and their cascades, removals. */
static void script_two(struct script *sc)
{
	struct ferry__gcs_op *op;

	op = next_op(sc, FERRY__GCS_OP_NODE_HEARTBEAT);
	op->heartbeat = (struct ferry__gcs_heartbeat){n2, 500, 1.5, 0, 2e9, 7};
	op = next_op(sc, FERRY__GCS_OP_NODE_STATE);
	op->node_state.id = n1;
	op->node_state.state = FERRY_GCS_NODE_DEAD;
	op->node_state.time_ms = 600;
	op = next_op(sc, FERRY__GCS_OP_WORKER_DEAD);
	op->worker_exit = (struct ferry__gcs_worker_exit){w2, 700, FERRY_GCS_EXIT_ERROR, "oom"};
	op = next_op(sc, FERRY__GCS_OP_OBJ_OWNER_DIED);
	op->owner = driver;
	op = next_op(sc, FERRY__GCS_OP_OBJ_REMOVE);
	op->obj_id = o4;
	op = next_op(sc, FERRY__GCS_OP_JOB_FINISH);
	op->job_finish.id = job1;
	op->job_finish.time_ms = 800;
	op = next_op(sc, FERRY__GCS_OP_PG_UPDATE);
	op->pg_update = (struct ferry__gcs_pg_update){p1, FERRY_GCS_PG_REMOVED, 0, NULL};
	op = next_op(sc, FERRY__GCS_OP_ERROR);
	op->error = (struct ferry__gcs_error){job1, 900, "node_died", NULL};
}

static void run(struct ferry__gcs_state *s, const struct script *sc)
{
	for (int i = 0; i < sc->n; i++) {
		int ret = ferry__gcs_state_apply(s, &sc->ops[i], NULL);

		if (ret < 0)
			ftest_log("op %d (type %d)", i, (int)sc->ops[i].type);
		ftest_assert_ok(ret);
	}
}

static const char *dir(void)
{
	static char path[128];

	snprintf(path, sizeof(path), "%s/gcs", ftest_tmpdir());
	return path;
}

static struct ferry__gcs_state *open_state(const char *wal_dir)
{
	struct ferry__gcs_state_opts opts = {0};
	struct ferry__gcs_state *s;

	opts.wal_dir = wal_dir;
	opts.tables.max_task_events = 3;
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s));
	return s;
}

static void dump(struct ferry__gcs_state *s, struct ferry__gcs_buf *out)
{
	memset(out, 0, sizeof(*out));
	ftest_assert_ok(ferry__gcs_state_dump(s, out));
}

static void assert_same(struct ferry__gcs_buf *a, struct ferry__gcs_buf *b)
{
	ftest_assert_uint_eq(a->size, b->size);
	ftest_assert_mem_eq(a->data, b->data, a->size);
}

static struct script full_script(void)
{
	struct script sc = {0};

	script_one(&sc);
	script_two(&sc);
	return sc;
}

FTEST(replay_restores_every_table_exactly)
{
	struct script sc = full_script();
	struct ferry__gcs_state *mem = open_state(NULL), *s = open_state(dir());
	struct ferry__gcs_buf a, b, c;

	run(mem, &sc);
	run(s, &sc);
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), (uint64_t)sc.n);
	dump(mem, &a);
	dump(s, &b);
	assert_same(&a, &b); /* the WAL changes nothing about the result */
	ferry__gcs_state_close(s);
	s = open_state(dir());
	dump(s, &c);
	assert_same(&a, &c);
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), (uint64_t)sc.n);
	/* Spot checks that the script did what it says. */
	ftest_assert_int_eq(ferry__objdir_get(ferry__gcs_state_objdir(s), &o1)->state,
			    FERRY_GCS_OBJECT_LOST);
	ftest_assert_int_eq(ferry__gcs_worker_get(ferry__gcs_state_tables(s), &w3)->exit_type,
			    FERRY_GCS_EXIT_NODE_DIED);
	ftest_assert_int_eq(ferry__objdir_get(ferry__gcs_state_objdir(s), &o5)->state,
			    FERRY_GCS_OBJECT_LOST); /* owner w2 died */
	ftest_assert_ptr_null(ferry__objdir_get(ferry__gcs_state_objdir(s), &o4));
	ftest_assert_uint_eq(ferry__gcs_task_events_count(ferry__gcs_state_tables(s)), 3);
	assert_place(s, &o3, &n3, 2 << 20, 78, 0x78c); /* the log kept the later place */
	ferry__gcs_buf_fini(&a);
	ferry__gcs_buf_fini(&b);
	ferry__gcs_buf_fini(&c);
	ferry__gcs_state_close(s);
	ferry__gcs_state_close(mem);
}

/* A GCS killed after its writes were durable restarts with exactly that state. */
FTEST(replay_after_a_crash)
{
	struct script sc = full_script();
	struct ferry__gcs_state *s;
	struct ferry__gcs_buf a, b;
	char path[256];
	int status, fd;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/dump", ftest_tmpdir());
	dir();
	pid = fork();
	if (pid == 0) {
		s = open_state(dir());
		run(s, &sc);
		if (ferry__gcs_state_wait(s) != 0 ||
		    ferry__gcs_state_durable_lsn(s) != (uint64_t)sc.n)
			_exit(2);
		dump(s, &a);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, a.data, a.size) != (ssize_t)a.size)
			_exit(3);
		_exit(0); /* no close, no snapshot */
	}
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
	s = open_state(dir());
	dump(s, &b);
	memset(&a, 0, sizeof(a));
	ftest_assert_ptr_notnull(ferry__gcs_buf_grow(&a, b.size + 1));
	fd = open(path, O_RDONLY);
	ftest_assert_int_eq(read(fd, a.data, b.size + 1), (ssize_t)b.size);
	close(fd);
	a.size = b.size;
	assert_same(&a, &b);
	ferry__gcs_buf_fini(&a);
	ferry__gcs_buf_fini(&b);
	ferry__gcs_state_close(s);
}

FTEST(snapshot_then_replay)
{
	struct script one = {0}, two = {0};
	struct ferry__gcs_state_opts opts = {0};
	struct ferry__wal_stats st;
	struct ferry__gcs_state *s;
	struct ferry__gcs_buf a, b;

	script_one(&one);
	script_two(&two);
	opts.wal_dir = dir();
	opts.tables.max_task_events = 3;
	opts.snapshot_log_bytes = 1; /* any log growth calls for a snapshot */
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s));
	ftest_assert_int_eq(ferry__gcs_state_maybe_snapshot(s), 0); /* empty log */
	run(s, &one);
	ftest_assert_int_eq(ferry__gcs_state_maybe_snapshot(s), 1);
	ftest_assert_errno(ferry__gcs_state_snapshot(s), -EBUSY);
	run(s, &two);
	ftest_assert_ok(ferry__gcs_state_wait(s));
	ferry__wal_get_stats(ferry__gcs_state_wal(s), &st);
	ftest_assert_uint_eq(st.snapshots, 1);
	ftest_assert_uint_eq(st.segments_deleted, 1);
	dump(s, &a);
	ferry__gcs_state_close(s);
	s = open_state(dir());
	ferry__wal_get_stats(ferry__gcs_state_wal(s), &st);
	ftest_assert_uint_gt(st.replayed, (uint64_t)two.n); /* snapshot records + the log */
	dump(s, &b);
	assert_same(&a, &b);
	assert_place(s, &o3, &n3, 2 << 20, 78, 0x78c); /* from the snapshot (script two keeps it) */
	ferry__gcs_buf_fini(&a);
	ferry__gcs_buf_fini(&b);
	ferry__gcs_state_close(s);
}

struct reports {
	int per_channel[FERRY_GCS_CH_COUNT]; /* reports per channel */
	int removed;			     /* reports of removed records */
};

static void on_change(void *arg, const struct ferry__gcs_change *c)
{
	struct reports *r = arg;

	r->per_channel[c->channel]++;
	r->removed += c->record == NULL;
}

FTEST(changes_and_cascades_are_reported)
{
	struct script sc = full_script();
	struct ferry__gcs_state_opts opts = {0};
	struct ferry__gcs_state *s;
	struct reports r = {0};

	opts.wal_dir = dir();
	opts.changed = on_change;
	opts.arg = &r;
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s));
	run(s, &sc);
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_NODES], 5);   /* 3 + heartbeat + death */
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_WORKERS], 6); /* 3 + w1, w3 cascade + w2 */
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_JOBS], 2);
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_ACTORS], 6);
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_ERRORS], 2);
	ftest_assert_int_gt(r.per_channel[FERRY_GCS_CH_OBJECT_LOCATIONS], 10);
	ftest_assert_int_eq(r.removed, 1);
	ferry__gcs_state_close(s);
	memset(&r, 0, sizeof(r));
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s)); /* replay reports nothing */
	ftest_assert_int_eq(r.per_channel[FERRY_GCS_CH_NODES], 0);
	ferry__gcs_state_close(s);
}

static uint64_t durable_seen;

static void on_durable(void *arg, uint64_t lsn, int err)
{
	(void)arg;
	ftest_assert_int_eq(err, 0);
	durable_seen = lsn;
}

FTEST(failed_ops_are_not_logged_and_lsns_ack_writes)
{
	struct script sc = {0};
	struct ferry__gcs_state_opts opts = {0};
	struct ferry__gcs_state *s;
	struct ferry__gcs_op bad = {0};
	uint64_t lsn = 0, restore_lsn = 7;

	script_one(&sc);
	opts.wal_dir = dir();
	opts.durable = on_durable;
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s));
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &sc.ops[0], &lsn), 1);
	ftest_assert_uint_eq(lsn, 1);
	ftest_assert_uint_eq(ferry__gcs_state_durable_lsn(s), 0); /* not acknowledged yet */
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &sc.ops[0], &lsn), 0); /* re-register */
	ftest_assert_uint_eq(lsn, 2);
	bad.type = FERRY__GCS_OP_ACTOR_UPDATE;
	bad.actor_update.id = a1;
	bad.actor_update.state = FERRY_GCS_ACTOR_ALIVE;
	ftest_assert_errno(ferry__gcs_state_apply(s, &bad, &lsn), -ENOENT);
	bad.type = FERRY__GCS_OP_RESTORE_NODE;
	ftest_assert_errno(ferry__gcs_state_apply(s, &bad, &restore_lsn), -EINVAL);
	ftest_assert_uint_eq(restore_lsn, 7);
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), 2);
	ftest_assert_ok(ferry__gcs_state_flush(s));
	ftest_assert_ok(ferry__gcs_state_wait(s));
	ftest_assert_uint_eq(ferry__gcs_state_durable_lsn(s), 2);
	ftest_assert_uint_eq(durable_seen, 2);
	ferry__gcs_state_close(s);
	s = open_state(dir());
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), 2);
	ferry__gcs_state_close(s);
}

FTEST(memory_only_state)
{
	struct script sc = full_script();
	struct ferry__gcs_state *s = open_state(NULL);
	uint64_t lsn;

	run(s, &sc);
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), (uint64_t)sc.n);
	ftest_assert_uint_eq(ferry__gcs_state_durable_lsn(s), (uint64_t)sc.n);
	ftest_assert_errno(ferry__gcs_state_snapshot(s), -EOPNOTSUPP);
	ftest_assert_int_eq(ferry__gcs_state_maybe_snapshot(s), 0);
	ftest_assert_int_eq(ferry__gcs_state_event_fd(s), -1);
	ftest_assert_ok(ferry__gcs_state_flush(s));
	ftest_assert_ok(ferry__gcs_state_process(s));
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &sc.ops[sc.n - 1], &lsn), 1); /* an error */
	ftest_assert_uint_eq(lsn, (uint64_t)sc.n + 1);
	ftest_assert_ptr_null(ferry__gcs_state_wal(s));
	ferry__gcs_state_close(s);
}

/* Every op of the script, with each of its allocations failing in turn: -ENOMEM and a state
 * identical to before (the dump says so); after the run, the log replays to the same state. */
FTEST(allocation_failures_through_apply)
{
	struct script sc = full_script();
	struct ferry__gcs_state *s = open_state(dir());
	struct ferry__gcs_buf before, after;
	int failures = 0;

	for (int i = 0; i < sc.n; i++) {
		for (long n = 0;; n++) {
			int ret;

			dump(s, &before);
			ferry__alloc_fail_after(n);
			ret = ferry__gcs_state_apply(s, &sc.ops[i], NULL);
			ferry__alloc_fail_after(-1);
			if (ret >= 0) {
				ferry__gcs_buf_fini(&before);
				break;
			}
			ftest_assert_errno(ret, -ENOMEM);
			dump(s, &after);
			assert_same(&before, &after);
			ferry__gcs_buf_fini(&before);
			ferry__gcs_buf_fini(&after);
			failures++;
		}
	}
	ftest_log("%d allocation failures injected", failures);
	ftest_assert_uint_eq(ferry__gcs_state_last_lsn(s), (uint64_t)sc.n);
	dump(s, &before);
	ferry__gcs_state_close(s);
	s = open_state(dir());
	dump(s, &after);
	assert_same(&before, &after);
	ferry__gcs_buf_fini(&before);
	ferry__gcs_buf_fini(&after);
	ferry__gcs_state_close(s);
}

/* Opening (replaying a snapshot and a log) under every allocation failure. */
FTEST(allocation_failures_through_open)
{
	struct script one = {0}, two = {0};
	struct ferry__gcs_state_opts opts = {.wal_dir = dir()};
	struct ferry__gcs_state *s;
	struct ferry__gcs_buf a, b;
	int ret, failures = 0;

	opts.tables.max_task_events = 3;
	script_one(&one);
	script_two(&two);
	ftest_assert_ok(ferry__gcs_state_open(&opts, &s));
	run(s, &one);
	ftest_assert_ok(ferry__gcs_state_snapshot(s));
	run(s, &two);
	dump(s, &a);
	ferry__gcs_state_close(s);
	for (long n = 0;; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry__gcs_state_open(&opts, &s);
		ferry__alloc_fail_after(-1);
		if (ret == 0)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		failures++;
	}
	ftest_log("%d allocation failures injected", failures);
	ftest_assert_int_gt(failures, 50);
	dump(s, &b);
	assert_same(&a, &b);
	ferry__gcs_buf_fini(&a);
	ferry__gcs_buf_fini(&b);
	ferry__gcs_state_close(s);
}

/* ---- the record codec ---- */

FTEST(records_round_trip)
{
	struct script sc = full_script();

	for (int i = 0; i < sc.n; i++) {
		struct ferry__gcs_buf one = {0}, two = {0};
		struct ferry__gcs_writer wa = {&one, 0}, wb = {&two, 0};
		struct ferry__gcs_op op;

		ferry__gcs_op_encode(&sc.ops[i], &wa);
		ftest_assert_ok(wa.err);
		ftest_assert_ok(ferry__gcs_op_decode(one.data, one.size, &op));
		ftest_assert_int_eq(op.type, sc.ops[i].type);
		ferry__gcs_op_encode(&op, &wb);
		ftest_assert_ok(wb.err);
		ftest_assert_uint_eq(one.size, two.size);
		ftest_assert_mem_eq(one.data, two.data, one.size);
		ferry__gcs_op_release(&op);
		ferry__gcs_buf_fini(&one);
		ferry__gcs_buf_fini(&two);
	}
}

/* Every prefix of every record, an unknown type, absurd counts: -EPROTO. */
FTEST(malformed_records_are_rejected)
{
	static const uint8_t unknown[] = {200, 0, 0};
	struct script sc = full_script();
	struct ferry__gcs_op op;
	uint8_t huge[64] = {FERRY__GCS_OP_PG_UPDATE};

	for (int i = 0; i < sc.n; i++) {
		struct ferry__gcs_buf b = {0};
		struct ferry__gcs_writer w = {&b, 0};

		ferry__gcs_op_encode(&sc.ops[i], &w);
		for (size_t len = 0; len < b.size; len++)
			ftest_assert_errno(ferry__gcs_op_decode(b.data, len, &op), -EPROTO);
		/* A FlatBuffer may end in padding: a GcsRecord's trailing byte is not an error
		 * (the WAL and the frames delimit records). */
		ferry__gcs_buf_fini(&b);
	}
	ftest_assert_errno(ferry__gcs_op_decode(unknown, sizeof(unknown), &op), -EPROTO);
	memset(huge + 1 + 16 + 1, 0xff, 4); /* nnodes = 4 billion */
	ftest_assert_errno(ferry__gcs_op_decode(huge, sizeof(huge), &op), -EPROTO);
	ftest_assert_uint_eq(ferry__crc32c(0, "123456789", 9), 0xe3069283u);
}

/* A copy's place, its check included, rides in OBJ_ADD_LOCATION; an unknown one reads back as
 * all 0; REMOVE_LOCATION carries none. */
FTEST(location_place_round_trips)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_ADD_LOCATION}, got;
	struct ferry__gcs_buf b;

	op.obj_location.id = o1;
	op.obj_location.node = n2;
	op.obj_location.size_bytes = 4096;
	op.obj_location.metadata_bytes = 8;
	op.obj_location.place = (struct ferry_gcs_object_place){0x123456789a, 42, 0xc4ec};
	b = encode(&op);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_mem_eq(&got.obj_location.id, &o1, sizeof(o1));
	ftest_assert_mem_eq(&got.obj_location.node, &n2, sizeof(n2));
	ftest_assert_uint_eq(got.obj_location.size_bytes, 4096);
	ftest_assert_uint_eq(got.obj_location.metadata_bytes, 8);
	ftest_assert_uint_eq(got.obj_location.place.offset, 0x123456789a);
	ftest_assert_uint_eq(got.obj_location.place.alloc, 42);
	ftest_assert_uint_eq(got.obj_location.place.check, 0xc4ec);
	ferry__gcs_buf_fini(&b);
	op.type = FERRY__GCS_OP_OBJ_REMOVE_LOCATION;
	b = encode(&op);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_uint_eq(got.obj_location.place.offset, 0);
	ftest_assert_uint_eq(got.obj_location.size_bytes, 0);
	ftest_assert_mem_eq(&got.obj_location.node, &n2, sizeof(n2));
	ferry__gcs_buf_fini(&b);
}

/* RESTORE_OBJ (and OBJ_ADD) carry one place per location, checks included, when any is known;
 * without them every place reads as unknown (NULL). */
FTEST(object_places_round_trip)
{
	static const struct ferry_gcs_object_place places[2] = {{64, 3, 0xc3}, {1u << 30, 4, 0xc4}};
	static const struct ferry_gcs_object_place unknown[2] = {{0, 0, 0}, {0, 0, 0}};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_RESTORE_OBJ}, got;
	struct ferry__gcs_buf with, without;

	op.obj.id = o1;
	op.obj.owner_worker = w1;
	op.obj.owner_node = n1;
	op.obj.size_bytes = 4096;
	op.obj.metadata_bytes = 24;
	op.obj.state = FERRY_GCS_OBJECT_AVAILABLE;
	op.obj.spill_url = "file:///spill/o1";
	op.obj.nlocations = 2;
	op.obj.locations = two_nodes;
	op.obj.places = places;
	with = encode(&op);
	ftest_assert_ok(ferry__gcs_op_decode(with.data, with.size, &got));
	ftest_assert_ptr_notnull(got.obj.places);
	ftest_assert_uint_eq(got.obj.nlocations, 2);
	for (int i = 0; i < 2; i++) {
		ftest_assert_mem_eq(&got.obj.locations[i], &two_nodes[i], sizeof(two_nodes[i]));
		ftest_assert_uint_eq(got.obj.places[i].offset, places[i].offset);
		ftest_assert_uint_eq(got.obj.places[i].alloc, places[i].alloc);
		ftest_assert_uint_eq(got.obj.places[i].check, places[i].check);
	}
	ftest_assert_uint_eq(got.obj.metadata_bytes, 24);
	ftest_assert_str_eq(got.obj.spill_url, "file:///spill/o1");
	ftest_assert_int_eq(got.obj.state, FERRY_GCS_OBJECT_AVAILABLE);
	ferry__gcs_op_release(&got);
	op.obj.places = unknown; /* all unknown: written as if NULL */
	without = encode(&op);
	ftest_assert_uint_lt(without.size, with.size);
	ftest_assert_ok(ferry__gcs_op_decode(without.data, without.size, &got));
	ftest_assert_ptr_null(got.obj.places);
	ftest_assert_uint_eq(got.obj.metadata_bytes, 24);
	ferry__gcs_op_release(&got);
	ferry__gcs_buf_fini(&with);
	ferry__gcs_buf_fini(&without);
}

/* Places through the log, a snapshot and the published record: a state built from ops listing
 * copies out of ID order, one of them moved and then given a new check alone (a change too),
 * replays and restores each place, check included, with its copy. */
FTEST(places_survive_replay_and_snapshots)
{
	static const struct ferry_node_id *order[3] = {&n3, &n1, &n2};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_ADD}, rec;
	struct ferry__gcs_buf scratch = {0};
	struct ferry__gcs_state *s = open_state(dir());
	struct ferry__wal_stats st;

	op.obj.id = o1;
	op.obj.owner_worker = w1;
	op.obj.owner_node = n1;
	op.obj.size_bytes = 4096;
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &op, NULL), 1);
	for (int i = 0; i < 3; i++) {
		uint64_t k = order[i]->bytes[1]; /* n1..n3: 1..3 */

		memset(&op, 0, sizeof(op));
		op.type = FERRY__GCS_OP_OBJ_ADD_LOCATION;
		op.obj_location.id = o1;
		op.obj_location.node = *order[i];
		op.obj_location.place = (struct ferry_gcs_object_place){k * 100u, k, k * 0x1111u};
		ftest_assert_int_eq(ferry__gcs_state_apply(s, &op, NULL), 1);
	}
	op.obj_location.place = (struct ferry_gcs_object_place){250, 5, 0x250}; /* n2's moved */
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &op, NULL), 1);
	op.obj_location.place.check = 0x251; /* the same allocation, a new check */
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &op, NULL), 1);
	ftest_assert_int_eq(ferry__gcs_state_apply(s, &op, NULL), 0);
	ferry__gcs_state_close(s);
	for (int round = 0; round < 2; round++) {
		s = open_state(dir()); /* round 0: the log; round 1: the snapshot */
		assert_place(s, &o1, &n1, 100, 1, 0x1111);
		assert_place(s, &o1, &n2, 250, 5, 0x251);
		assert_place(s, &o1, &n3, 300, 3, 0x3333);
		ftest_assert_ok(ferry__gcs_object_op(
			ferry__objdir_get(ferry__gcs_state_objdir(s), &o1), &scratch, &rec));
		for (uint32_t i = 0; i < 3; i++) { /* sorted by node, places beside them */
			ftest_assert_uint_eq(rec.obj.locations[i].bytes[1], i + 1);
			ftest_assert_uint_eq(rec.obj.places[i].alloc, i == 1 ? 5 : i + 1);
			ftest_assert_uint_eq(rec.obj.places[i].check,
					     i == 1 ? 0x251 : 0x1111 * (i + 1));
		}
		if (round == 0) {
			ftest_assert_ok(ferry__gcs_state_snapshot(s));
			ftest_assert_ok(ferry__gcs_state_wait(s));
			ferry__wal_get_stats(ferry__gcs_state_wal(s), &st);
			ftest_assert_uint_eq(st.snapshots, 1);
			ftest_assert_uint_eq(st.segments_deleted, 1); /* the log is gone */
		}
		ferry__gcs_state_close(s);
	}
	ferry__gcs_buf_fini(&scratch);
}
