/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of the GCS's table calls and correctness guarantees through real ferry-gcs
 * processes: KV multi-get / keys / delete by prefix, node list / drain / unregister, jobs,
 * workers, actors and placement groups (with custom resources, across a restart on the WAL); a
 * resent request applied once (also across a crash and a restart on the
 * WAL); a node's death dropping its copies on every object directory shard; the logs channel
 * (published, never stored) and the errors channel (stored and published).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "common/wire.h"
#include "gcs/client.h"
#include "gcs/ops.h"
#include "tests/integration/gcs/gcs_procs.h"

FTEST(kv_multi_get_keys_and_delete_prefix)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_bytes keys[3] = {{"app/a", 5}, {"app/missing", 11}, {"app/b", 5}};
	struct ferry_gcs_bytes *values, *listed;

	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns", 2, "app/a", 5, "1", 1, true), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns", 2, "app/b", 5, "22", 2, true), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns", 2, "other", 5, "333", 3, true), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns2", 3, "app/c", 5, "x", 1, true), 1);
	ftest_assert_int_eq(ferry_gcs_kv_multi_get(c, "ns", 2, keys, 3, &values), 2);
	ftest_assert_mem_eq(values[0].data, "1", 1);
	ftest_assert_ptr_null(values[1].data);
	ftest_assert_uint_eq(values[2].size, 2);
	ftest_assert_mem_eq(values[2].data, "22", 2);
	ferry_gcs_free(values);
	ftest_assert_int_eq(ferry_gcs_kv_keys(c, "ns", 2, "app/", 4, &listed), 2);
	ftest_assert_mem_eq(listed[0].data, "app/a", 5);
	ftest_assert_mem_eq(listed[1].data, "app/b", 5);
	ferry_gcs_free(listed);
	ftest_assert_int_eq(ferry_gcs_kv_keys(c, "ns", 2, NULL, 0, &listed), 3);
	ferry_gcs_free(listed);
	ftest_assert_int_eq(ferry_gcs_kv_delete_prefix(c, "ns", 2, "app/", 4), 2);
	ftest_assert_int_eq(ferry_gcs_kv_keys(c, "ns", 2, "app/", 4, &listed), 0);
	ferry_gcs_free(listed);
	ftest_assert_int_eq(ferry_gcs_kv_exists(c, "ns", 2, "other", 5), 1);
	ftest_assert_int_eq(ferry_gcs_kv_exists(c, "ns2", 3, "app/c", 5), 1);
	ftest_assert_errno(ferry_gcs_kv_multi_get(c, "ns", 2, keys, 0, &values), -EINVAL);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

static void register_node(struct ferry_gcs_client *c, struct ferry_node_id *id, const char *addr)
{
	struct ferry_gcs_node_info n = {0};

	ferry_node_id_random(id);
	n.id = *id;
	n.address = addr;
	n.cpu = 8;
	ftest_assert_int_eq(ferry_gcs_node_register(c, &n), 1);
}

static const struct ferry_gcs_node_info *find_node(const struct ferry_gcs_node_info *nodes, int n,
						   const struct ferry_node_id *id)
{
	for (int i = 0; i < n; i++)
		if (!memcmp(nodes[i].id.bytes, id->bytes, sizeof(id->bytes)))
			return &nodes[i];
	return NULL;
}

FTEST(node_list_drain_unregister)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_node_info *nodes;
	const struct ferry_gcs_node_info *n;
	struct ferry_node_id a, b, unknown;

	register_node(c, &a, "10.0.0.1:7000");
	register_node(c, &b, "10.0.0.2:7000");
	ferry_node_id_random(&unknown);
	ftest_assert_int_eq(ferry_gcs_node_drain(c, &a), 1);
	ftest_assert_int_eq(ferry_gcs_node_drain(c, &a), 0);
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &b), 1);
	ftest_assert_errno(ferry_gcs_node_drain(c, &unknown), -ENOENT);
	ftest_assert_int_eq(ferry_gcs_node_list(c, &nodes), 2);
	n = find_node(nodes, 2, &a);
	ftest_assert_ptr_notnull(n);
	ftest_assert_str_eq(n->address, "10.0.0.1:7000");
	ftest_assert_int_eq(n->state, FERRY_GCS_NODE_DRAINING);
	ftest_assert_true(n->cpu == 8);
	n = find_node(nodes, 2, &b);
	ftest_assert_ptr_notnull(n);
	ftest_assert_str_eq(n->address, "10.0.0.2:7000");
	ftest_assert_int_eq(n->state, FERRY_GCS_NODE_DEAD);
	ferry_gcs_free(nodes);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(jobs_workers_actors)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_job_info job = {0}, *jobs;
	struct ferry_gcs_worker_info worker = {0}, *workers;
	struct ferry_gcs_actor_info actor = {0}, *got, *actors;
	struct ferry_node_id node;

	register_node(c, &node, "10.0.0.3:7000");
	ferry_job_id_random(&job.id);
	job.driver_node = node;
	job.driver_pid = 42;
	job.entrypoint = "python train.py";
	ftest_assert_int_eq(ferry_gcs_job_add(c, &job), 1);
	ftest_assert_errno(ferry_gcs_job_add(c, &job), -EEXIST);
	ftest_assert_int_eq(ferry_gcs_job_finish(c, &job.id), 1);
	ftest_assert_int_eq(ferry_gcs_job_list(c, &jobs), 1);
	ftest_assert_int_eq(jobs[0].state, FERRY_GCS_JOB_FINISHED);
	ftest_assert_str_eq(jobs[0].entrypoint, "python train.py");
	ftest_assert_uint_eq(jobs[0].driver_pid, 42);
	ferry_gcs_free(jobs);

	ferry_worker_id_random(&worker.id);
	worker.node = node;
	worker.job = job.id;
	worker.pid = 7;
	worker.address = "10.0.0.3:7001";
	ftest_assert_int_eq(ferry_gcs_worker_add(c, &worker), 1);

	ferry_actor_id_random(&actor.id);
	actor.job = job.id;
	actor.owner = worker.id;
	actor.name = "counter";
	actor.class_name = "Counter";
	actor.max_restarts = 1;
	ftest_assert_int_eq(ferry_gcs_actor_register(c, &actor), 1);
	ftest_assert_int_eq(ferry_gcs_actor_update(c, &actor.id, FERRY_GCS_ACTOR_ALIVE, &node,
						   &worker.id, FERRY_GCS_EXIT_NONE, NULL),
			    1);
	/* PENDING is not reachable from ALIVE: the state machine refuses. */
	ftest_assert_errno(ferry_gcs_actor_update(c, &actor.id, FERRY_GCS_ACTOR_PENDING, NULL, NULL,
						  FERRY_GCS_EXIT_NONE, NULL),
			   -EINVAL);
	ftest_assert_int_eq(ferry_gcs_worker_dead(c, &worker.id, FERRY_GCS_EXIT_ERROR, "segfault"),
			    1);
	ftest_assert_int_eq(ferry_gcs_actor_update(c, &actor.id, FERRY_GCS_ACTOR_DEAD, NULL, NULL,
						   FERRY_GCS_EXIT_ERROR, "its worker crashed"),
			    1);
	ftest_assert_ok(ferry_gcs_actor_get(c, &actor.id, &got));
	ftest_assert_int_eq(got->state, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(got->death_cause, FERRY_GCS_EXIT_ERROR);
	ftest_assert_str_eq(got->death_message, "its worker crashed");
	ftest_assert_str_eq(got->name, "counter");
	ftest_assert_str_eq(got->class_name, "Counter");
	ferry_gcs_free(got);
	ftest_assert_int_eq(ferry_gcs_actor_list(c, &actors), 1);
	ferry_gcs_free(actors);
	ftest_assert_int_eq(ferry_gcs_worker_list(c, &workers), 1);
	ftest_assert_int_eq(workers[0].state, FERRY_GCS_WORKER_DEAD);
	ftest_assert_str_eq(workers[0].exit_message, "segfault");
	ftest_assert_str_eq(workers[0].address, "10.0.0.3:7001");
	ferry_gcs_free(workers);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(placement_groups)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_bundle bundles[2] = {{.cpu = 1}, {.cpu = 2, .gpu = 1}};
	struct ferry_gcs_pg_info pg = {0}, *got, *all;
	struct ferry_node_id nodes[2];

	register_node(c, &nodes[0], "10.0.0.4:7000");
	register_node(c, &nodes[1], "10.0.0.5:7000");
	ferry_placement_group_id_random(&pg.id);
	ferry_job_id_random(&pg.job);
	pg.name = "trainers";
	pg.strategy = FERRY_GCS_PG_STRICT_SPREAD;
	pg.nbundles = 2;
	pg.bundles = bundles;
	ftest_assert_int_eq(ferry_gcs_pg_create(c, &pg), 1);
	ftest_assert_errno(ferry_gcs_pg_create(c, &pg), -EEXIST);
	/* CREATED needs a node per bundle. */
	ftest_assert_errno(ferry_gcs_pg_update(c, &pg.id, FERRY_GCS_PG_CREATED, nodes, 1), -EINVAL);
	ftest_assert_int_eq(ferry_gcs_pg_update(c, &pg.id, FERRY_GCS_PG_CREATED, nodes, 2), 1);
	ftest_assert_ok(ferry_gcs_pg_get(c, &pg.id, &got));
	ftest_assert_int_eq(got->state, FERRY_GCS_PG_CREATED);
	ftest_assert_int_eq(got->strategy, FERRY_GCS_PG_STRICT_SPREAD);
	ftest_assert_str_eq(got->name, "trainers");
	ftest_assert_uint_eq(got->nbundles, 2);
	ftest_assert_true(got->bundles[1].cpu == 2 && got->bundles[1].gpu == 1);
	ftest_assert_mem_eq(got->bundles[1].node.bytes, nodes[1].bytes, sizeof(nodes[1].bytes));
	ferry_gcs_free(got);
	ftest_assert_int_eq(ferry_gcs_pg_update(c, &pg.id, FERRY_GCS_PG_REMOVED, NULL, 0), 1);
	ftest_assert_int_eq(ferry_gcs_pg_list(c, &all), 1);
	ftest_assert_int_eq(all[0].state, FERRY_GCS_PG_REMOVED);
	ferry_gcs_free(all);
	ferry_placement_group_id_random(&pg.id);
	ftest_assert_errno(ferry_gcs_pg_get(c, &pg.id, &got), -ENOENT);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* A bundle's custom resources, byte for byte as created. */
static void assert_custom(const struct ferry_gcs_bundle *b, const struct ferry_gcs_resource *want,
			  uint32_t n)
{
	ftest_assert_uint_eq(b->ncustom, n);
	for (uint32_t i = 0; i < n; i++) {
		ftest_assert_str_eq(b->custom[i].name, want[i].name);
		ftest_assert_true(b->custom[i].amount == want[i].amount);
	}
	if (!n)
		ftest_assert_ptr_null(b->custom);
}

FTEST(placement_group_custom_resources_survive_a_restart)
{
	char wal[512];
	const char *args[] = {"--wal", wal, NULL};
	const struct ferry_gcs_resource tpu[] = {{"tpu", 4}, {"ssd", 0.5}};
	const struct ferry_gcs_resource fpga[] = {{"fpga", 1}};
	const struct ferry_gcs_resource twice[] = {{"x", 1}, {"x", 2}};
	const struct ferry_gcs_resource negative[] = {{"x", -1}};
	struct ferry_gcs_bundle bundles[3] = {{.cpu = 1, .ncustom = 2, .custom = tpu},
					      {.cpu = 2},
					      {.gpu = 1, .ncustom = 1, .custom = fpga}};
	struct ferry_gcs_pg_info pg = {0}, bad, *got, *all;
	struct ferry_gcs_client *c;
	struct gcs_proc p;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	ferry_placement_group_id_random(&pg.id);
	ferry_job_id_random(&pg.job);
	pg.strategy = FERRY_GCS_PG_PACK;
	pg.nbundles = 3;
	pg.bundles = bundles;
	ftest_assert_int_eq(ferry_gcs_pg_create(c, &pg), 1);
	/* Refused whole: a name twice, a negative amount (server), custom without its array. */
	bad = pg;
	ferry_placement_group_id_random(&bad.id);
	bundles[1] = (struct ferry_gcs_bundle){.cpu = 2, .ncustom = 2, .custom = twice};
	ftest_assert_errno(ferry_gcs_pg_create(c, &bad), -EINVAL);
	bundles[1] = (struct ferry_gcs_bundle){.cpu = 2, .ncustom = 1, .custom = negative};
	ftest_assert_errno(ferry_gcs_pg_create(c, &bad), -EINVAL);
	bundles[1] = (struct ferry_gcs_bundle){.cpu = 2, .ncustom = 1, .custom = NULL};
	ftest_assert_errno(ferry_gcs_pg_create(c, &bad), -EINVAL);
	ftest_assert_errno(ferry_gcs_pg_get(c, &bad.id, &got), -ENOENT);
	ferry_gcs_client_destroy(c);
	/* Killed, restarted on its log: the group comes back with every custom resource. */
	gcs_stop(&p, SIGKILL);
	p = gcs_start(p.port, args);
	c = client_for(&p, 1, TOKEN);
	ftest_assert_ok(ferry_gcs_pg_get(c, &pg.id, &got));
	ftest_assert_uint_eq(got->nbundles, 3);
	assert_custom(&got->bundles[0], tpu, 2);
	assert_custom(&got->bundles[1], NULL, 0);
	assert_custom(&got->bundles[2], fpga, 1);
	ftest_assert_true(got->bundles[0].cpu == 1 && got->bundles[2].gpu == 1);
	ferry_gcs_free(got);
	ftest_assert_int_eq(ferry_gcs_pg_list(c, &all), 1);
	assert_custom(&all[0].bundles[0], tpu, 2);
	assert_custom(&all[0].bundles[2], fpga, 1);
	ferry_gcs_free(all);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* ---- a resent request ---- */

static int raw_open(uint16_t port)
{
	struct timeval tv = {10, 0};
	int fd = raw_connect(port);

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	raw_send_handshake(fd);
	return fd;
}

/* The next GcsReply's status (the handshake reply is skipped). */
static int raw_reply(int fd, struct ferry__frame_parser *parser)
{
	struct ferry__frame f;

	for (;;) {
		uint8_t *space;
		size_t size;
		ssize_t n;

		while (ferry__frame_parser_next(parser, &f) == 1)
			if (f.type == FERRY__WIRE_MSG_GCS_REPLY)
				return ferry__wire_gcs_reply_status(
					ferry__wire_gcs_reply_root_verified(f.payload));
		ftest_assert_ok(ferry__frame_parser_space(parser, &space, &size));
		n = read(fd, space, size);
		ftest_assert_int_gt(n, 0);
		ferry__frame_parser_commit(parser, (size_t)n);
	}
}

/* An add-only KV put (1 added, 0 existed) as request @seq of client @client. */
static int put_once(uint16_t port, const uint8_t *client, uint64_t seq)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_PUT};
	struct ferry__gcs_buf rec = {0};
	struct ferry__gcs_writer w = {&rec, 0};
	struct ferry__wire_gcs_request m = {0};
	struct ferry__frame_parser parser;
	struct ferry__fb_builder b = {0};
	int fd = raw_open(port), status;

	op.kv.key = (struct ferry__gcs_slice){"k", 1};
	op.kv.value = (struct ferry__gcs_slice){"v", 1};
	ferry__gcs_op_encode(&op, &w);
	ftest_assert_ok(w.err);
	m.seq = seq;
	m.op = rec.data;
	m.op_count = rec.size;
	memcpy(m.client.bytes, client, sizeof(m.client.bytes));
	ftest_assert_ok(ferry__wire_gcs_request_build(&b, &m));
	raw_send(fd, FERRY__WIRE_MSG_GCS_REQUEST, ferry__fb_builder_data(&b),
		 ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	ferry__gcs_buf_fini(&rec);
	ferry__frame_parser_init(&parser, 0);
	status = raw_reply(fd, &parser);
	ferry__frame_parser_fini(&parser);
	close(fd);
	return status;
}

FTEST(resent_request_applies_once_across_a_restart)
{
	char wal[512];
	const char *args[] = {"--wal", wal, NULL};
	const uint8_t client[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
	const uint8_t other[16] = {1, 2, 3};
	struct gcs_proc p;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	ftest_assert_int_eq(put_once(p.port, client, 5), 1); /* added */
	/* The same request again (a reconnect's resend): the first result, not applied twice. */
	ftest_assert_int_eq(put_once(p.port, client, 5), 1);
	/* A new request of the same client, or another client's, is applied: the key exists. */
	ftest_assert_int_eq(put_once(p.port, client, 6), 0);
	ftest_assert_int_eq(put_once(p.port, other, 5), 0);
	gcs_stop(&p, SIGKILL);
	p = gcs_start(p.port, args);
	/* The results came back with the log. */
	ftest_assert_int_eq(put_once(p.port, client, 5), 1);
	ftest_assert_int_eq(put_once(p.port, client, 6), 0);
	ftest_assert_int_eq(put_once(p.port, client, 7), 0);
	gcs_stop(&p, SIGTERM);
}

/* ---- node death on every shard ---- */

FTEST(node_death_drops_copies_on_every_shard)
{
	char shard0[64];
	const char *a0[] = {"--shard", "0/2", "--node-deadline-ms", "300", NULL};
	const char *a1[] = {"--shard", "1/2", "--shard0", shard0, NULL};
	struct gcs_proc p[2];
	struct ferry_gcs_client *c;
	struct ferry_object_id ids[2];
	struct ferry_worker_id owner;
	struct ferry_node_id node, keeper;

	p[0] = gcs_start(0, a0);
	snprintf(shard0, sizeof(shard0), "127.0.0.1:%u", p[0].port);
	p[1] = gcs_start(0, a1);
	c = client_for(p, 2, TOKEN);
	register_node(c, &node, "10.0.0.9:7000");
	register_node(c, &keeper, "10.0.0.10:7000");
	ferry_worker_id_random(&owner);
	/* One object on each shard, each with a copy on both nodes. */
	for (int found = 0; found < 3;) {
		struct ferry_object_id id;
		uint32_t s;

		ferry_object_id_random(&id);
		s = ferry_gcs_object_shard(&id, 2);
		if (found & (1 << s))
			continue;
		found |= 1 << s;
		ids[s] = id;
		ftest_assert_int_eq(ferry_gcs_object_add(c, &id, &owner, &keeper, 8), 1);
		ftest_assert_int_eq(ferry_gcs_object_add_location(c, &id, &node, 8), 1);
		ftest_assert_int_eq(ferry_gcs_object_add_location(c, &id, &keeper, 8), 1);
	}
	/* The node leaves (no heartbeats needed: unregister is its death) on shard 0 ... */
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &node), 1);
	/* ... and both shards drop its copy: shard 1 learns it from shard 0 (wait, bounded). */
	for (int s = 0; s < 2; s++) {
		struct ferry_gcs_object_info info = {0};

		for (int i = 0; i < 500; i++) {
			ftest_assert_ok(ferry_gcs_object_lookup(c, &ids[s], &info));
			if (info.nlocations == 1)
				break;
			ferry_gcs_free(info.locations);
			info.locations = NULL;
			usleep(10 * 1000);
		}
		ftest_assert_uint_eq(info.nlocations, 1);
		ftest_assert_mem_eq(info.locations[0].bytes, keeper.bytes, sizeof(keeper.bytes));
		ferry_gcs_free(info.locations);
	}
	ferry_gcs_client_destroy(c);
	gcs_stop(&p[1], SIGTERM);
	gcs_stop(&p[0], SIGTERM);
}

/* Mutations pipelined over two shards (the node's directory thread sends its queue this way):
 * each op gets its own status, and an object's ops apply in array order on its shard. */
FTEST(apply_many_keeps_order_and_statuses_per_op)
{
	char shard0[64];
	const char *a1[] = {"--shard", "1/2", "--shard0", shard0, NULL};
	const char *a0[] = {"--shard", "0/2", NULL};
	struct gcs_proc p[2];
	struct ferry_gcs_client *c;
	struct ferry_object_id ids[8];
	struct ferry_worker_id owner;
	struct ferry_node_id node;
	struct ferry__gcs_op ops[8 * 3 + 1];
	unsigned shards[8 * 3 + 1];
	int st[8 * 3 + 1];
	size_t n = 0;

	p[0] = gcs_start(0, a0);
	snprintf(shard0, sizeof(shard0), "127.0.0.1:%u", p[0].port);
	p[1] = gcs_start(0, a1);
	c = client_for(p, 2, TOKEN);
	ferry_worker_id_random(&owner);
	ferry_node_id_random(&node);
	/* Per object: add, add_location, remove_location; only an in-order apply ends with the
	 * object listed at no node (out of order: -ENOENT statuses, or a location left). */
	for (int i = 0; i < 8; i++) {
		unsigned s = (unsigned)i % 2; /* both shards, interleaved */

		do
			ferry_object_id_random(&ids[i]);
		while (ferry_gcs_object_shard(&ids[i], 2) != s);
		ops[n] = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_ADD};
		ops[n].obj.id = ids[i];
		ops[n].obj.owner_worker = owner;
		ops[n].obj.owner_node = node;
		ops[n].obj.size_bytes = 8;
		shards[n++] = s;
		for (int k = 0; k < 2; k++) {
			ops[n] = (struct ferry__gcs_op){
				.type = k == 0 ? FERRY__GCS_OP_OBJ_ADD_LOCATION
					       : FERRY__GCS_OP_OBJ_REMOVE_LOCATION};
			ops[n].obj_location.id = ids[i];
			ops[n].obj_location.node = node;
			ops[n].obj_location.size_bytes = 8;
			shards[n++] = s;
		}
	}
	/* The first object added again: its own status, -EEXIST, the others unaffected. */
	ops[n] = ops[0];
	shards[n++] = shards[0];
	ftest_assert_ok(ferry__gcs_client_apply_many(c, shards, ops, n, st));
	for (size_t i = 0; i + 1 < n; i++)
		ftest_assert_int_eq(st[i], 1);
	ftest_assert_errno(st[n - 1], -EEXIST);
	for (int i = 0; i < 8; i++) {
		struct ferry_gcs_object_info info = {0};

		ftest_assert_ok(ferry_gcs_object_lookup(c, &ids[i], &info));
		ftest_assert_uint_eq(info.nlocations, 0);
		ferry_gcs_free(info.locations);
	}
	/* Bad arguments: nothing is sent. */
	shards[0] = 2;
	ftest_assert_errno(ferry__gcs_client_apply_many(c, shards, ops, n, st), -EINVAL);
	ftest_assert_errno(ferry__gcs_client_apply_many(c, NULL, ops, 1, st), -EINVAL);
	ftest_assert_ok(ferry__gcs_client_apply_many(c, NULL, NULL, 0, NULL));
	ferry_gcs_client_destroy(c);
	gcs_stop(&p[1], SIGTERM);
	gcs_stop(&p[0], SIGTERM);
}

/* ---- errors and logs ---- */

struct stream {
	pthread_mutex_t lock;	   /* guards the rest */
	pthread_cond_t cond;	   /* signalled on each line */
	unsigned lines;		   /* log lines or errors received */
	unsigned bad;		   /* events that did not decode, or out of order */
	char last[64];		   /* the last line or message */
	struct ferry_job_id job;   /* the last one's job */
	enum ferry_gcs_channel ch; /* which channel this collects */
	unsigned first;		   /* logs: the number of the first line expected */
};

static void on_stream(void *arg, const struct ferry_gcs_event *ev)
{
	struct stream *s = arg;
	struct ferry_gcs_error_info e;
	struct ferry_gcs_log_info l;
	char text[64] = "";
	struct ferry_job_id job;
	int ret;

	if (ev->kind != FERRY_GCS_EVENT_DELTA)
		return; /* streams have nothing to snapshot */
	if (s->ch == FERRY_GCS_CH_LOGS) {
		ret = ferry_gcs_event_log(ev, &l);
		job = l.job;
		if (ret == 0)
			snprintf(text, sizeof(text), "%.*s", (int)l.size, (const char *)l.data);
	} else {
		ret = ferry_gcs_event_error(ev, &e);
		job = e.job;
		if (ret == 0)
			snprintf(text, sizeof(text), "%s: %s", e.type, e.message);
	}
	pthread_mutex_lock(&s->lock);
	if (ret < 0) {
		s->bad++;
	} else {
		/* Lines are published numbered: per-publisher FIFO means they come in order. */
		if (s->ch == FERRY_GCS_CH_LOGS && (unsigned)atoi(text + 5) != s->first + s->lines)
			s->bad++;
		s->lines++;
		s->job = job;
		memcpy(s->last, text, sizeof(s->last));
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void stream_wait(struct stream *s, unsigned n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10; /* a hang guard */
	pthread_mutex_lock(&s->lock);
	while (s->lines < n && pthread_cond_timedwait(&s->cond, &s->lock, &until) == 0)
		;
	ftest_assert_uint_eq(s->lines, n);
	pthread_mutex_unlock(&s->lock);
}

/* Log lines reach whole-channel and per-job subscribers in order and are never stored: a
 * subscriber that comes later gets no old lines; errors are stored and published. */
FTEST(logs_and_errors_channels)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *pub = client_for(&p, 1, TOKEN), *sub = client_for(&p, 1, TOKEN);
#define STREAM(channel, first_line)                                                  \
	{                                                                            \
		.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, \
		.ch = channel, .first = first_line                                   \
	}
	struct stream all = STREAM(FERRY_GCS_CH_LOGS, 0), one = STREAM(FERRY_GCS_CH_LOGS, 50),
		      late = STREAM(FERRY_GCS_CH_LOGS, 0), errs = STREAM(FERRY_GCS_CH_ERRORS, 0);
	struct ferry_job_id a, b;
	char line[32];
	static char big[(64 << 10) + 1];

	memset(&a, 0xa1, sizeof(a));
	memset(&b, 0xb2, sizeof(b));
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_LOGS, NULL, 0, on_stream, &all));
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_LOGS, b.bytes, sizeof(b.bytes),
					    on_stream, &one));
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_ERRORS, NULL, 0, on_stream, &errs));
	for (int i = 0; i < 100; i++) {
		snprintf(line, sizeof(line), "line %d", i);
		ftest_assert_ok(ferry_gcs_log_publish(pub, i < 50 ? &a : &b, line, strlen(line)));
	}
	stream_wait(&all, 100);
	ftest_assert_uint_eq(all.bad, 0);
	ftest_assert_str_eq(all.last, "line 99");
	/* The per-job subscriber saw only job b's 50 lines, in order. */
	stream_wait(&one, 50);
	ftest_assert_uint_eq(one.bad, 0);
	ftest_assert_true(!memcmp(&one.job, &b, sizeof(b)));
	/* Nothing stored: a new subscriber hears only what comes after it. */
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_LOGS, NULL, 0, on_stream, &late));
	ftest_assert_ok(ferry_gcs_log_publish(pub, &a, "line 0", 6));
	stream_wait(&late, 1);
	ftest_assert_uint_eq(late.bad, 0);
	/* Bad input. */
	ftest_assert_errno(ferry_gcs_log_publish(pub, &a, big, sizeof(big)), -E2BIG);
	ftest_assert_errno(ferry_gcs_log_publish(pub, NULL, "x", 1), -EINVAL);
	ftest_assert_errno(ferry_gcs_error_report(pub, &a, NULL, "x"), -EINVAL);
	/* Errors: stored and published, decoded with their type and message. */
	ftest_assert_ok(ferry_gcs_error_report(pub, &a, "task", "it failed"));
	stream_wait(&errs, 1);
	ftest_assert_str_eq(errs.last, "task: it failed");
	ftest_assert_true(!memcmp(&errs.job, &a, sizeof(a)));
	ferry_gcs_client_destroy(pub);
	ferry_gcs_client_destroy(sub);
	gcs_stop(&p, SIGTERM);
}
