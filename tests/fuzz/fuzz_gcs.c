/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the GCS server's request decoder: the input is a byte stream of frames
 * as a client would send them; each frame goes through the server's check (verify by type,
 * then decode the GCS record of a GcsRequest), and every record that decodes is applied to an
 * in-memory GCS state, as the server would.
 *
 * Built with FUZZ_GCS_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_gcs_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_gcs_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD gcs-corpus)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "gcs/records.h"
#include "gcs/server.h"
#include "gcs/values.h"
#include "gcs/state.h"

#define FUZZ_MAX_LENGTH (1u << 20)

#include "fuzz_replay.h"

static void apply(struct ferry__gcs_state *s, const struct ferry__frame *f)
{
	struct ferry__wire_gcs_request_view v;
	struct ferry__gcs_op op;

	if (f->type != FERRY__WIRE_MSG_GCS_REQUEST)
		return;
	v = ferry__wire_gcs_request_root_verified(f->payload);
	if (ferry__gcs_op_decode(ferry__wire_gcs_request_op_data(v),
				 ferry__wire_gcs_request_op_count(v), &op) == 0) {
		/* Heartbeats and load reports stop at the server (server_load.c): its check. */
		if (op.type == FERRY__GCS_OP_NODE_LOAD)
			(void)ferry__gcs_load_check(&op.load);
		else
			(void)ferry__gcs_state_apply(s, &op, NULL);
		ferry__gcs_op_release(&op);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct ferry__gcs_state_opts so = {0};
	struct ferry__gcs_state *s = NULL;
	struct ferry__frame_parser p;
	struct ferry__frame f;
	int ret;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	if (ferry__gcs_state_open(&so, &s) < 0)
		return 0;
	ferry__frame_parser_init(&p, FUZZ_MAX_LENGTH);
	ret = ferry__frame_parser_feed(&p, data, size);
	while (ret >= 0 && (ret = ferry__frame_parser_next(&p, &f)) == 1)
		if (ferry__gcs_request_check(f.type, f.payload, f.length) == 0)
			apply(s, &f);
	ferry__frame_parser_fini(&p);
	ferry__gcs_state_close(s);
	return 0;
}

#ifdef FUZZ_GCS_REPLAY

/* ---- seeds ---- */

static int write_frame(FILE *f, struct ferry__fb_builder *b, uint16_t type)
{
	const uint8_t *frame;
	size_t size;

	if (ferry__frame_finish(b, type, &frame, &size) < 0)
		return -1;
	return fwrite(frame, 1, size, f) == size ? 0 : -1;
}

static int write_op(FILE *f, struct ferry__fb_builder *b, const struct ferry__gcs_op *op)
{
	struct ferry__gcs_buf rec = {0};
	struct ferry__gcs_writer w = {&rec, 0};
	struct ferry__wire_gcs_request m = {.seq = 1};
	int ret;

	ferry__gcs_op_encode(op, &w);
	m.op = rec.data;
	m.op_count = rec.size;
	ret = w.err ? -1 : ferry__wire_gcs_request_build(b, &m);
	if (ret == 0)
		ret = write_frame(f, b, FERRY__WIRE_MSG_GCS_REQUEST);
	ferry__gcs_buf_fini(&rec);
	return ret;
}

/* A heartbeat and a load report of @node. */
static int seed_liveness(FILE *f, struct ferry__fb_builder *b, const struct ferry_node_id *node)
{
	static const struct ferry_gcs_resource_load res[] = {
		{"CPU", 80000, 5000}, {"GPU", 0, 0}, {"tpu", 40000, 40000}};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT};
	int ret;

	op.heartbeat.id = *node;
	ret = write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_NODE_LOAD;
	op.load.id = *node;
	op.load.version = 7;
	op.load.queue_length = 2;
	op.load.mean_task_us = 1500;
	op.load.nresources = 3;
	op.load.resources = res;
	return ret | write_op(f, b, &op);
}

static int seed_ops(FILE *f, struct ferry__fb_builder *b)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_REGISTER};
	struct ferry_gcs_object_place place = {4096, 17, 0x5eedc4ec5eedc4ec};
	struct ferry_node_id node = {{1, 2, 3}};
	struct ferry_object_id obj = {{9, 8, 7}}, obj2 = {{9, 8, 6}};
	int ret = 0;

	op.node.id = node;
	op.node.address = "10.0.0.1:7000";
	op.node.total.cpu = 8;
	op.node.state = FERRY_GCS_NODE_ALIVE;
	op.node.transports = FERRY_GCS_TRANSPORT_TCP;
	ret |= write_op(f, b, &op);
	ret |= seed_liveness(f, b, &node);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_KV_PUT;
	op.kv.ns = (struct ferry__gcs_slice){"ns", 2};
	op.kv.key = (struct ferry__gcs_slice){"key", 3};
	op.kv.value = (struct ferry__gcs_slice){"value", 5};
	ret |= write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_OBJ_ADD;
	op.obj.id = obj;
	op.obj.owner_worker.bytes[0] = 5;
	op.obj.owner_node = node;
	ret |= write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_OBJ_ADD_LOCATION;
	op.obj_location.id = obj;
	op.obj_location.node = node;
	ret |= write_op(f, b, &op);
	op.obj_location.place = place; /* the same copy listed with its place: the later field */
	ret |= write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_OBJ_ADD; /* with a copy and its place: the places block */
	op.obj.id = obj2;
	op.obj.owner_worker.bytes[0] = 5;
	op.obj.owner_node = node;
	op.obj.nlocations = 1;
	op.obj.locations = &node;
	op.obj.places = &place;
	ret |= write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_NODE_STATE;
	op.node_state.id = node;
	op.node_state.state = FERRY_GCS_NODE_DEAD;
	ret |= write_op(f, b, &op);
	memset(&op, 0, sizeof(op));
	op.type = FERRY__GCS_OP_OBJ_NODE_DIED;
	op.node_id = node;
	ret |= write_op(f, b, &op);
	return ret;
}

static int seed_reads(FILE *f, struct ferry__fb_builder *b)
{
	struct ferry__wire_gcs_kv_get kv = {.seq = 2,
					    .ns = (const uint8_t *)"ns",
					    .ns_count = 2,
					    .key = (const uint8_t *)"key",
					    .key_count = 3};
	struct ferry__wire_gcs_object_lookup ol = {.seq = 3, .object_id = {{9, 8, 7}}};
	struct ferry__wire_gcs_table_get tg = {.seq = 4, .table = 0, .id = {{1, 2, 3}}};
	struct ferry__wire_gcs_subscribe sub = {.seq = 5, .channel = FERRY_GCS_CH_NODES};
	/* multi-get (op 3): the keys as a GcsValueList */
	static const struct ferry__gcs_value keys[2] = {{{"a", 1}, true}, {{"key", 3}, true}};
	struct ferry__gcs_buf key_list = {0};
	struct ferry__wire_gcs_kv_get mg = {.seq = 6, .op = 3};
	struct ferry__wire_gcs_table_get list = {.seq = 7, .table = 4, .list = true};
	struct ferry__wire_gcs_table_get loads = {.seq = 8, .table = 16, .list = true};
	static const struct ferry_object_id ids[2] = {{{9, 8, 7}}, {{1, 2, 3}}};
	struct ferry__wire_gcs_object_lookup_batch olb = {
		.seq = 9, .object_ids = ids, .object_ids_count = 2};
	struct ferry__wire_gcs_unsubscribe unsub = {.seq = 10, .channel = FERRY_GCS_CH_NODES};
	int ret = 0;

	ret |= ferry__wire_gcs_kv_get_build(b, &kv) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_KV_GET);
	ret |= ferry__wire_gcs_object_lookup_build(b, &ol) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP);
	ret |= ferry__wire_gcs_table_get_build(b, &tg) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_TABLE_GET);
	ret |= ferry__wire_gcs_subscribe_build(b, &sub) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_SUBSCRIBE);
	ret |= ferry__gcs_values_encode(keys, 2, &key_list);
	mg.key = key_list.data;
	mg.key_count = key_list.size;
	ret |= ferry__wire_gcs_kv_get_build(b, &mg) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_KV_GET);
	ferry__gcs_buf_fini(&key_list);
	ret |= ferry__wire_gcs_table_get_build(b, &list) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_TABLE_GET);
	ret |= ferry__wire_gcs_table_get_build(b, &loads) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_TABLE_GET);
	ret |= ferry__wire_gcs_object_lookup_batch_build(b, &olb) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP_BATCH);
	ret |= ferry__wire_gcs_unsubscribe_build(b, &unsub) ||
	       write_frame(f, b, FERRY__WIRE_MSG_GCS_UNSUBSCRIBE);
	return ret;
}

int fuzz_make_corpus(const char *dir)
{
	static const char *const names[] = {"seed-ops", "seed-reads"};
	struct ferry__fb_builder b = {0};
	int bad = 0;

	for (int i = 0; i < 2; i++) {
		char path[4096];
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		f = fopen(path, "wb");
		if (!f) {
			perror(path);
			bad = 1;
			continue;
		}
		bad |= (i == 0 ? seed_ops(f, &b) : seed_reads(f, &b)) != 0;
		bad |= fclose(f) != 0;
	}
	ferry__fb_builder_fini(&b);
	return bad;
}

#endif
