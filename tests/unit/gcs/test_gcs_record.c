/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS records as FlatBuffers (schema/gcs.fbs GcsRecord): every family (KV, LOG, nodes, jobs,
 * workers, actors, task events, errors, placement groups, objects, dedup, dropped counts,
 * heartbeats; load reports: test_load_record.c) encodes as the zero prefix + a GcsRecord of
 * the current version that the generated reader verifies; a record of another version, or
 * whose type does not match the table it carries, is refused, and so are the first release's
 * hand-written records, the heartbeat's included (with a log line).
 */
#include <stdio.h>
#include <string.h>

#include "ftest.h"
#include "gcs/ops.h"
#include "gcs/values.h"
#include "record_util.h"
#include "schema/ferry_schema.h"

static struct ferry__gcs_slice str(const char *s)
{
	return (struct ferry__gcs_slice){s, strlen(s)};
}

/* Prefix @b's finished GcsRecord with the zero bytes into @out. */
static void with_prefix(struct ferry__fb_builder *b, struct ferry__gcs_buf *out)
{
	static const uint8_t zero[FERRY__GCS_RECORD_PREFIX];
	struct ferry__gcs_writer w = {out, 0};

	ferry__gcs_put_raw(&w, zero, sizeof(zero));
	ferry__gcs_put_raw(&w, ferry__fb_builder_data(b), ferry__fb_builder_size(b));
	ftest_assert_ok(w.err);
}

FTEST(kv_put_is_a_versioned_gcs_record)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_PUT}, got;
	struct ferry__wire_gcs_record_view v;
	struct ferry__wire_gcs_kv_op_view kv;
	struct ferry__gcs_buf b;

	op.kv.ns = str("fn");
	op.kv.key = str("fn/add");
	op.kv.value = str("code");
	op.kv.overwrite = true;
	b = encode(&op);
	ftest_assert_uint_ge(b.size, FERRY__GCS_RECORD_PREFIX + 8);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__wire_gcs_record_root(b.data + FERRY__GCS_RECORD_PREFIX,
						    b.size - FERRY__GCS_RECORD_PREFIX, &v));
	ftest_assert_uint_eq(ferry__wire_gcs_record_version(v), FERRY__GCS_RECORD_VERSION);
	ftest_assert_uint_eq(ferry__wire_gcs_record_type(v), FERRY__WIRE_GCS_OP_TYPE_KV_PUT);
	kv = ferry__wire_gcs_record_kv(v);
	ftest_assert_uint_eq(ferry__wire_gcs_kv_op_key_count(kv), 6);
	ftest_assert_mem_eq(ferry__wire_gcs_kv_op_key_data(kv), "fn/add", 6);
	ftest_assert_true(ferry__wire_gcs_kv_op_overwrite(kv));
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_KV_PUT);
	ftest_assert_uint_eq(got.kv.value.size, 4);
	ftest_assert_mem_eq(got.kv.value.data, "code", 4);
	ftest_assert_uint_eq(got.kv.ns.size, 2);
	ftest_assert_true(got.kv.overwrite);
	ferry__gcs_op_release(&got);
	ferry__gcs_buf_fini(&b);
}

FTEST(log_is_a_gcs_record)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_LOG}, got;
	struct ferry__gcs_buf b;

	op.log.job.bytes[0] = 7;
	op.log.data = str("hello");
	b = encode(&op);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_LOG);
	ftest_assert_uint_eq(got.log.job.bytes[0], 7);
	ftest_assert_uint_eq(got.log.data.size, 5);
	ftest_assert_mem_eq(got.log.data.data, "hello", 5);
	ferry__gcs_buf_fini(&b);
}

/* Another version, a type without its table, an unknown type: -EPROTO. */
FTEST(other_versions_and_mismatched_tables_are_refused)
{
	struct ferry__wire_gcs_kv_op kv = {.key = (const uint8_t *)"k", .key_count = 1};
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION + 1,
					     .type = FERRY__WIRE_GCS_OP_TYPE_KV_DELETE,
					     .kv = &kv};
	struct ferry__fb_builder fb;
	struct ferry__gcs_op got;
	struct ferry__gcs_buf b = {0};

	ferry__fb_builder_init(&fb);
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	rec.version = FERRY__GCS_RECORD_VERSION;
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_KV_DELETE);
	rec.type = FERRY__WIRE_GCS_OP_TYPE_LOG; /* carries kv, not log */
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	rec.type = FERRY__WIRE_GCS_OP_TYPE_NODE_HEARTBEAT; /* carries kv, not heartbeat */
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	rec.type = 99; /* no such op type */
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	ferry__fb_builder_fini(&fb);
	ferry__gcs_buf_fini(&b);
}

/* A node with labels and custom resources round-trips; text with a NUL inside is refused. */
FTEST(node_records_round_trip_and_refuse_bad_text)
{
	static const struct ferry_gcs_resource custom[] = {{"tpu", 2}, {"fpga", 0.5}};
	static const struct ferry__gcs_label labels[] = {{"zone", "b"}, {"rack", NULL}};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_RESTORE_NODE}, got;
	struct ferry__wire_gcs_label bad_label = {"zoneXX", "b"};
	struct ferry__wire_gcs_node bad_node = {.labels = &bad_label, .labels_count = 1};
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION,
					     .type = FERRY__WIRE_GCS_OP_TYPE_NODE_REGISTER,
					     .node = &bad_node};
	struct ferry__fb_builder fb;
	struct ferry__gcs_buf b, again;

	op.node.id.bytes[0] = 9;
	op.node.address = "10.0.0.9:7000";
	op.node.total = (struct ferry__gcs_resources){4, 1, 1e9, 2, custom};
	op.node.nlabels = 2;
	op.node.labels = labels;
	op.node.state = FERRY_GCS_NODE_DRAINING;
	op.node.start_ms = 1234;
	op.node.avail_cpu = 2.5;
	op.node.queue_length = 3;
	b = encode(&op);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_RESTORE_NODE);
	ftest_assert_str_eq(got.node.address, "10.0.0.9:7000");
	ftest_assert_uint_eq(got.node.total.ncustom, 2);
	ftest_assert_str_eq(got.node.total.custom[1].name, "fpga");
	ftest_assert_true(got.node.total.custom[1].amount == 0.5);
	ftest_assert_uint_eq(got.node.nlabels, 2);
	ftest_assert_str_eq(got.node.labels[0].value, "b");
	ftest_assert_ptr_null(got.node.labels[1].value);
	ftest_assert_int_eq(got.node.state, FERRY_GCS_NODE_DRAINING);
	ftest_assert_uint_eq(got.node.queue_length, 3);
	again = encode(&got);
	ftest_assert_uint_eq(again.size, b.size);
	ftest_assert_mem_eq(again.data, b.data, b.size);
	ferry__gcs_op_release(&got);
	ferry__gcs_buf_fini(&again);
	b.size = 0;
	ferry__fb_builder_init(&fb);
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	/* Our builder stores strlen() bytes: put the NUL inside the stored key afterwards. */
	for (size_t i = 0; i + 6 <= b.size; i++)
		if (!memcmp(b.data + i, "zoneXX", 6))
			b.data[i + 2] = 0;
	ftest_assert_ok(ferry__wire_gcs_record_verify(b.data + FERRY__GCS_RECORD_PREFIX,
						      b.size - FERRY__GCS_RECORD_PREFIX));
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	ferry__fb_builder_fini(&fb);
	ferry__gcs_buf_fini(&b);
}

/* Jobs and node state changes: GcsRecords that decode to what was encoded. */
FTEST(job_and_node_state_records_round_trip)
{
	struct ferry__gcs_op job = {.type = FERRY__GCS_OP_JOB_ADD},
			     fin = {.type = FERRY__GCS_OP_JOB_FINISH};
	struct ferry__gcs_op st = {.type = FERRY__GCS_OP_NODE_STATE}, got;
	struct ferry__gcs_buf b;

	job.job.id.bytes[0] = 3;
	job.job.state = FERRY_GCS_JOB_RUNNING;
	job.job.driver_pid = 4242;
	job.job.entrypoint = "python train.py";
	job.job.start_ms = 99;
	b = encode(&job);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_JOB_ADD);
	ftest_assert_uint_eq(got.job.id.bytes[0], 3);
	ftest_assert_uint_eq(got.job.driver_pid, 4242);
	ftest_assert_str_eq(got.job.entrypoint, "python train.py");
	ftest_assert_ptr_null(got.job.driver_address);
	ftest_assert_uint_eq(got.job.start_ms, 99);
	ferry__gcs_buf_fini(&b);
	fin.job_finish.id.bytes[0] = 3;
	fin.job_finish.time_ms = 120;
	b = encode(&fin);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_JOB_FINISH);
	ftest_assert_uint_eq(got.job_finish.time_ms, 120);
	ferry__gcs_buf_fini(&b);
	st.node_state.id.bytes[0] = 5;
	st.node_state.state = FERRY_GCS_NODE_DEAD;
	st.node_state.time_ms = 7;
	b = encode(&st);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_NODE_STATE);
	ftest_assert_int_eq(got.node_state.state, FERRY_GCS_NODE_DEAD);
	ftest_assert_uint_eq(got.node_state.id.bytes[0], 5);
	ftest_assert_uint_eq(got.node_state.time_ms, 7);
	ferry__gcs_buf_fini(&b);
}

/* Workers and their deaths: GcsRecords that decode to what was encoded. */
FTEST(worker_records_round_trip)
{
	struct ferry__gcs_op add = {.type = FERRY__GCS_OP_RESTORE_WORKER};
	struct ferry__gcs_op dead = {.type = FERRY__GCS_OP_WORKER_DEAD}, got;
	struct ferry__gcs_buf b;

	add.worker.id.bytes[0] = 2;
	add.worker.node.bytes[0] = 1;
	add.worker.pid = 77;
	add.worker.address = "127.0.0.1:9";
	add.worker.state = FERRY_GCS_WORKER_DEAD;
	add.worker.exit_type = FERRY_GCS_EXIT_ERROR;
	add.worker.exit_message = "oom";
	add.worker.end_ms = 5;
	b = encode(&add);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_RESTORE_WORKER);
	ftest_assert_uint_eq(got.worker.node.bytes[0], 1);
	ftest_assert_uint_eq(got.worker.pid, 77);
	ftest_assert_str_eq(got.worker.address, "127.0.0.1:9");
	ftest_assert_int_eq(got.worker.exit_type, FERRY_GCS_EXIT_ERROR);
	ftest_assert_str_eq(got.worker.exit_message, "oom");
	ftest_assert_uint_eq(got.worker.end_ms, 5);
	ferry__gcs_buf_fini(&b);
	dead.worker_exit.id.bytes[0] = 2;
	dead.worker_exit.time_ms = 6;
	dead.worker_exit.exit_type = FERRY_GCS_EXIT_NORMAL;
	b = encode(&dead);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_WORKER_DEAD);
	ftest_assert_uint_eq(got.worker_exit.time_ms, 6);
	ftest_assert_int_eq(got.worker_exit.exit_type, FERRY_GCS_EXIT_NORMAL);
	ftest_assert_ptr_null(got.worker_exit.message);
	ferry__gcs_buf_fini(&b);
}

/* Actors and their updates: GcsRecords that decode to what was encoded. */
FTEST(actor_records_round_trip)
{
	struct ferry__gcs_op reg = {.type = FERRY__GCS_OP_ACTOR_REGISTER};
	struct ferry__gcs_op upd = {.type = FERRY__GCS_OP_ACTOR_UPDATE}, got;
	struct ferry__gcs_buf b;

	reg.actor.id.bytes[0] = 4;
	reg.actor.owner.bytes[0] = 2;
	reg.actor.name = "counter";
	reg.actor.class_name = "Counter";
	reg.actor.state = FERRY_GCS_ACTOR_PENDING;
	reg.actor.max_restarts = -1;
	b = encode(&reg);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_ACTOR_REGISTER);
	ftest_assert_uint_eq(got.actor.owner.bytes[0], 2);
	ftest_assert_str_eq(got.actor.name, "counter");
	ftest_assert_str_eq(got.actor.class_name, "Counter");
	ftest_assert_int_eq(got.actor.max_restarts, -1);
	ftest_assert_ptr_null(got.actor.death_message);
	ferry__gcs_buf_fini(&b);
	upd.actor_update.id.bytes[0] = 4;
	upd.actor_update.state = FERRY_GCS_ACTOR_DEAD;
	upd.actor_update.death_cause = FERRY_GCS_EXIT_KILLED;
	upd.actor_update.death_message = "killed by request";
	b = encode(&upd);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_ACTOR_UPDATE);
	ftest_assert_int_eq(got.actor_update.state, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(got.actor_update.death_cause, FERRY_GCS_EXIT_KILLED);
	ftest_assert_str_eq(got.actor_update.death_message, "killed by request");
	ferry__gcs_buf_fini(&b);
}

/* Task events and errors: GcsRecords that decode to what was encoded. */
FTEST(task_event_and_error_records_round_trip)
{
	struct ferry__gcs_op ev = {.type = FERRY__GCS_OP_TASK_EVENT};
	struct ferry__gcs_op err = {.type = FERRY__GCS_OP_ERROR}, got;
	struct ferry__gcs_buf b;

	ev.task_event.task.bytes[0] = 8;
	ev.task_event.attempt = 2;
	ev.task_event.state = FERRY_GCS_TASK_FINISHED;
	ev.task_event.time_ms = 11;
	b = encode(&ev);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_TASK_EVENT);
	ftest_assert_uint_eq(got.task_event.task.bytes[0], 8);
	ftest_assert_uint_eq(got.task_event.attempt, 2);
	ftest_assert_int_eq(got.task_event.state, FERRY_GCS_TASK_FINISHED);
	ftest_assert_uint_eq(got.task_event.time_ms, 11);
	ferry__gcs_buf_fini(&b);
	err.error.time_ms = 12;
	err.error.type = "worker_died";
	err.error.message = "exit code 9";
	b = encode(&err);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_ERROR);
	ftest_assert_uint_eq(got.error.time_ms, 12);
	ftest_assert_str_eq(got.error.type, "worker_died");
	ftest_assert_str_eq(got.error.message, "exit code 9");
	ferry__gcs_buf_fini(&b);
}

/* The log lines a test saw, for checking that a refusal says why. */
static char logged[1024];

static void capture(void *arg, enum ferry_log_level level, const char *component,
		    const char *message)
{
	size_t n = strlen(logged);

	(void)arg;
	(void)level;
	snprintf(logged + n, sizeof(logged) - n, "%s: %s\n", component, message);
}

/* Records in the first release's hand-written format (type byte, then fields) are no longer
 * read: a KV_PUT and an OBJ_ADD_LOCATION as an older log or node wrote them, and a heartbeat as
 * an older node sent it, get -EPROTO and a log line. */
FTEST(hand_written_records_are_refused)
{
	struct ferry__gcs_buf b = {0};
	struct ferry__gcs_writer w = {&b, 0};
	struct ferry__gcs_op got;
	uint8_t ids[36] = {0};

	ferry__gcs_put_u8(&w, FERRY__GCS_OP_KV_PUT);
	ferry__gcs_put_bytes(&w, "ns", 2);
	ferry__gcs_put_bytes(&w, "key", 3);
	ferry__gcs_put_bytes(&w, "value", 5);
	ferry__gcs_put_u8(&w, 1);
	ftest_assert_ok(w.err);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	b.size = 0;
	ferry__gcs_put_u8(&w, FERRY__GCS_OP_OBJ_ADD_LOCATION);
	ferry__gcs_put_raw(&w, ids, sizeof(ids)); /* object, node */
	ferry__gcs_put_u64(&w, 4096);
	ftest_assert_ok(w.err);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	/* The heartbeat: id, u64 time_ms, f64 cpu, gpu, memory, u32 queue_length. */
	b.size = 0;
	ferry__gcs_put_u8(&w, FERRY__GCS_OP_NODE_HEARTBEAT);
	ferry__gcs_put_raw(&w, ids, 16);
	ferry__gcs_put_u64(&w, 5);
	ferry__gcs_put_f64(&w, 4);
	ferry__gcs_put_f64(&w, 0);
	ferry__gcs_put_f64(&w, 1 << 30);
	ferry__gcs_put_u32(&w, 0);
	ftest_assert_ok(w.err);
	logged[0] = 0;
	ferry_log_set_handler(capture, NULL);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	ferry_log_set_handler(NULL, NULL);
	ftest_assert_ptr_notnull(strstr(logged, "not a GcsRecord"));
	ftest_assert_ptr_notnull(strstr(logged, "hand-written"));
	ferry__gcs_buf_fini(&b);
}

/* A heartbeat is a versioned GcsRecord with its table, and round-trips every field. */
FTEST(heartbeat_records_round_trip)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT}, got;
	struct ferry__wire_gcs_record_view v;
	struct ferry__gcs_buf b;

	ferry_node_id_random(&op.heartbeat.id);
	op.heartbeat.time_ms = 1700000000123;
	op.heartbeat.avail_cpu = 3.5;
	op.heartbeat.avail_gpu = 1;
	op.heartbeat.avail_memory_bytes = 12e9;
	op.heartbeat.queue_length = 17;
	b = encode(&op);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__wire_gcs_record_root(b.data + FERRY__GCS_RECORD_PREFIX,
						    b.size - FERRY__GCS_RECORD_PREFIX, &v));
	ftest_assert_uint_eq(ferry__wire_gcs_record_version(v), FERRY__GCS_RECORD_VERSION);
	ftest_assert_uint_eq(ferry__wire_gcs_record_type(v),
			     FERRY__WIRE_GCS_OP_TYPE_NODE_HEARTBEAT);
	ftest_assert_true(ferry__wire_gcs_record_has_heartbeat(v));
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_NODE_HEARTBEAT);
	ftest_assert_mem_eq(&got.heartbeat.id, &op.heartbeat.id, sizeof(op.heartbeat.id));
	ftest_assert_uint_eq(got.heartbeat.time_ms, 1700000000123);
	ftest_assert_true(got.heartbeat.avail_cpu == 3.5);
	ftest_assert_true(got.heartbeat.avail_gpu == 1);
	ftest_assert_true(got.heartbeat.avail_memory_bytes == 12e9);
	ftest_assert_uint_eq(got.heartbeat.queue_length, 17);
	ferry__gcs_op_release(&got);
	for (size_t len = 0; len < b.size; len++)
		ftest_assert_errno(ferry__gcs_op_decode(b.data, len, &got), -EPROTO);
	ferry__gcs_buf_fini(&b);
}

/* A placement group with bundles (custom resources, nodes) and its state change round-trip. */
FTEST(placement_group_records_round_trip)
{
	static const struct ferry_gcs_resource custom[] = {{"tpu", 2}};
	struct ferry__gcs_bundle bundles[2] = {0};
	struct ferry_node_id nodes[2] = {{{4}}, {{5}}};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_RESTORE_PG}, got;
	struct ferry__gcs_buf b;

	bundles[0].resources.cpu = 2;
	bundles[0].resources.ncustom = 1;
	bundles[0].resources.custom = custom;
	bundles[0].node = nodes[0];
	bundles[1].resources.gpu = 1;
	op.pg.id.bytes[0] = 9;
	op.pg.job.bytes[0] = 3;
	op.pg.name = "trainers";
	op.pg.strategy = FERRY_GCS_PG_SPREAD;
	op.pg.state = FERRY_GCS_PG_CREATED;
	op.pg.nbundles = 2;
	op.pg.bundles = bundles;
	b = encode(&op);
	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_RESTORE_PG);
	ftest_assert_uint_eq(got.pg.id.bytes[0], 9);
	ftest_assert_uint_eq(got.pg.job.bytes[0], 3);
	ftest_assert_str_eq(got.pg.name, "trainers");
	ftest_assert_int_eq(got.pg.strategy, FERRY_GCS_PG_SPREAD);
	ftest_assert_int_eq(got.pg.state, FERRY_GCS_PG_CREATED);
	ftest_assert_uint_eq(got.pg.nbundles, 2);
	ftest_assert_true(got.pg.bundles[0].resources.cpu == 2);
	ftest_assert_uint_eq(got.pg.bundles[0].resources.ncustom, 1);
	ftest_assert_str_eq(got.pg.bundles[0].resources.custom[0].name, "tpu");
	ftest_assert_uint_eq(got.pg.bundles[0].node.bytes[0], 4);
	ftest_assert_true(got.pg.bundles[1].resources.gpu == 1);
	ftest_assert_uint_eq(got.pg.bundles[1].resources.ncustom, 0);
	ferry__gcs_op_release(&got);
	ferry__gcs_buf_fini(&b);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_PG_UPDATE;
	op.pg_update.id.bytes[0] = 9;
	op.pg_update.state = FERRY_GCS_PG_CREATED;
	op.pg_update.nnodes = 2;
	op.pg_update.nodes = nodes;
	b = encode(&op);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_int_eq(got.type, FERRY__GCS_OP_PG_UPDATE);
	ftest_assert_uint_eq(got.pg_update.nnodes, 2);
	ftest_assert_uint_eq(got.pg_update.nodes[1].bytes[0], 5);
	ferry__gcs_op_release(&got);
	ferry__gcs_buf_fini(&b);
}

/* Encode @op, decode it back into @got (released by the caller), the record a GcsRecord. */
static void round_trip(const struct ferry__gcs_op *op, struct ferry__gcs_op *got)
{
	struct ferry__gcs_buf b = encode(op);

	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, got));
	ftest_assert_int_eq(got->type, op->type);
	ferry__gcs_buf_fini(&b); /* got borrows text from b: check none of it here */
}

/* The object directory's small records, dedup and dropped counts round-trip. */
FTEST(object_dedup_and_dropped_records_round_trip)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_REMOVE}, got;

	op.obj_id.bytes[19] = 7;
	round_trip(&op, &got);
	ftest_assert_uint_eq(got.obj_id.bytes[19], 7);
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_OWNER_DIED};
	op.owner.bytes[15] = 6;
	round_trip(&op, &got);
	ftest_assert_uint_eq(got.owner.bytes[15], 6);
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_NODE_DIED};
	op.node_id.bytes[0] = 5;
	round_trip(&op, &got);
	ftest_assert_uint_eq(got.node_id.bytes[0], 5);
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_REQUEST_DONE};
	op.request_done.client[3] = 0xab;
	op.request_done.seq = 1234567890123ull;
	op.request_done.status = -17;
	round_trip(&op, &got);
	ftest_assert_uint_eq(got.request_done.client[3], 0xab);
	ftest_assert_uint_eq(got.request_done.seq, 1234567890123ull);
	ftest_assert_int_eq(got.request_done.status, -17);
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_RESTORE_DROPPED};
	op.dropped.task_events = 11;
	op.dropped.errors = 12;
	round_trip(&op, &got);
	ftest_assert_uint_eq(got.dropped.task_events, 11);
	ftest_assert_uint_eq(got.dropped.errors, 12);
	op = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_SPILLED};
	op.obj_spilled.id.bytes[0] = 1;
	round_trip(&op, &got); /* no URL: none any more */
	ftest_assert_ptr_null(got.obj_spilled.url);
}

/* An object whose places do not pair with its copies, or with too many copies: -EPROTO. */
FTEST(object_places_must_pair_with_copies)
{
	struct ferry__wire_unique_id ids[2] = {{{1}}, {{2}}};
	struct ferry__wire_gcs_object_place places[1] = {{64, 3, 0}};
	struct ferry__wire_gcs_object obj = {
		.locations = ids, .locations_count = 2, .places = places, .places_count = 1};
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION,
					     .type = FERRY__WIRE_GCS_OP_TYPE_RESTORE_OBJ,
					     .object = &obj};
	struct ferry__fb_builder fb;
	struct ferry__gcs_op got;
	struct ferry__gcs_buf b = {0};

	ferry__fb_builder_init(&fb);
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	obj.places_count = 0;
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &got));
	ftest_assert_uint_eq(got.obj.nlocations, 2);
	ftest_assert_ptr_null(got.obj.places);
	ferry__gcs_op_release(&got);
	rec.type = FERRY__WIRE_GCS_OP_TYPE_PG_CREATE; /* carries an object, not a group */
	b.size = 0;
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, &rec));
	with_prefix(&fb, &b);
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &got), -EPROTO);
	ferry__fb_builder_fini(&fb);
	ferry__gcs_buf_fini(&b);
}

/* List values (GcsValueList) round-trip, found flags included; an empty buffer is an empty
 * list; bytes that are not a GcsValueList, or more entries than allowed: -EPROTO. */
FTEST(value_lists_round_trip_and_refuse_garbage)
{
	static const struct ferry__gcs_value in[3] = {
		{{"k1", 2}, true}, {{NULL, 0}, false}, {{"", 0}, true}};
	static const uint8_t garbage[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	struct ferry__gcs_buf b = {0};
	struct ferry__gcs_values vl;
	struct ferry__gcs_value e;

	ftest_assert_ok(ferry__gcs_values_encode(in, 3, &b));
	ftest_assert_ok(ferry__gcs_values_open(b.data, b.size, 3, "test", &vl));
	ftest_assert_uint_eq(vl.count, 3);
	e = ferry__gcs_values_at(&vl, 0);
	ftest_assert_true(e.found);
	ftest_assert_uint_eq(e.data.size, 2);
	ftest_assert_mem_eq(e.data.data, "k1", 2);
	ftest_assert_false(ferry__gcs_values_at(&vl, 1).found);
	e = ferry__gcs_values_at(&vl, 2);
	ftest_assert_true(e.found);
	ftest_assert_uint_eq(e.data.size, 0);
	ftest_assert_errno(ferry__gcs_values_open(b.data, b.size, 2, "test", &vl), -EPROTO);
	ftest_assert_errno(ferry__gcs_values_open(b.data, b.size - 1, 3, "test", &vl), -EPROTO);
	ftest_assert_errno(ferry__gcs_values_open(garbage, sizeof(garbage), 3, "test", &vl),
			   -EPROTO);
	ftest_assert_ok(ferry__gcs_values_open(NULL, 0, 3, "test", &vl));
	ftest_assert_uint_eq(vl.count, 0);
	ferry__gcs_buf_fini(&b);
}
