/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every message of the schemas (schema/NAME.fbs): build, verify by type, read back field by
 * field (generated samples: all-absent, schema defaults, and random with edge values),
 * truncation, allocation failure; and a few messages written out by hand the way the plasma
 * code will use them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"
#include "schema/ferry_schema_testgen.h"
#include "wire_util.h"

static struct sample_space space;

static const struct ferry__wire_test_table *sample(const char *name, uint32_t seed)
{
	const struct ferry__wire_test_table *t = ferry__wire_test_table_find(name);
	struct ferry__wire_test_pool pool = {space.pool, sizeof(space.pool), 0};

	ftest_assert_ptr_notnull(t);
	ftest_assert_uint_le(t->value_size, sizeof(space.value));
	ftest_assert_ok(t->sample(&pool, seed, space.value));
	return t;
}

FTEST(message_table_lists_every_type_once)
{
	size_t messages = 0;

	for (size_t i = 0; i < ferry__wire_test_table_count; i++) {
		const struct ferry__wire_test_table *t = &ferry__wire_test_tables[i];
		const struct ferry__fb_message_info *info;

		if (!t->msg_type)
			continue;
		messages++;
		info = ferry__wire_message_info(t->msg_type);
		ftest_assert_ptr_notnull(info);
		ftest_assert_str_eq(info->name, t->name);
		ftest_assert_str_eq(ferry__wire_message_name(t->msg_type), t->name);
	}
	for (size_t i = 0; i < ferry__wire_message_count; i++)
		messages += ferry__wire_messages[i].framed_bytes != 0; /* no table: DataChunk */
	ftest_assert_uint_eq(messages, ferry__wire_message_count);
	ftest_assert_ptr_null(ferry__wire_message_info(0));
	ftest_assert_ptr_null(ferry__wire_message_info(4));
	ftest_assert_ptr_null(ferry__wire_message_info(UINT16_MAX));
	ftest_assert_str_eq(ferry__wire_message_name(UINT16_MAX), "unknown");
}

FTEST(every_message_round_trips_through_verify_by_type)
{
	struct ferry__fb_builder b;

	ferry__fb_builder_init(&b);
	for (size_t i = 0; i < ferry__wire_test_table_count; i++) {
		const char *name = ferry__wire_test_tables[i].name;

		for (uint32_t seed = 0; seed < 200; seed++) {
			const struct ferry__wire_test_table *t = sample(name, seed);
			const char *bad;

			ftest_assert_ok(t->build(&b, space.value));
			if (t->msg_type)
				ftest_assert_ok(ferry__wire_verify(t->msg_type,
								   ferry__fb_builder_data(&b),
								   ferry__fb_builder_size(&b)));
			else
				ftest_assert_ok(t->verify(ferry__fb_builder_data(&b),
							  ferry__fb_builder_size(&b)));
			bad = t->check(ferry__fb_builder_data(&b), space.value);
			if (bad)
				FTEST__FAIL("%s seed %u: %s differs", name, seed, bad);
			(void)t->walk(ferry__fb_builder_data(&b));
		}
	}
	ferry__fb_builder_fini(&b);
}

FTEST(truncated_messages_are_rejected)
{
	struct ferry__fb_builder b = {0};

	for (size_t i = 0; i < ferry__wire_test_table_count; i++) {
		for (uint32_t seed = 0; seed < 12; seed++) {
			const struct ferry__wire_test_table *t =
				sample(ferry__wire_test_tables[i].name, seed);
			size_t len;
			uint8_t *copy;

			ftest_assert_ok(t->build(&b, space.value));
			len = ferry__fb_builder_size(&b);
			for (size_t cut = 0; cut < len; cut++) {
				copy = malloc(cut + 1);
				ftest_assert_ptr_notnull(copy);
				memcpy(copy, ferry__fb_builder_data(&b), cut);
				ftest_assert_errno(t->verify(copy, cut), -EPROTO);
				free(copy);
			}
		}
	}
	ferry__fb_builder_fini(&b);
}

FTEST(oom_at_every_allocation_for_every_message)
{
	for (size_t i = 0; i < ferry__wire_test_table_count; i++) {
		const struct ferry__wire_test_table *t = sample(ferry__wire_test_tables[i].name, 3);

		for (long n = 0;; n++) {
			struct ferry__fb_builder b;
			int ret;

			ferry__fb_builder_init(&b);
			ferry__alloc_fail_after(n);
			ret = t->build(&b, space.value);
			ferry__alloc_fail_after(-1);
			ferry__fb_builder_fini(&b);
			if (ret != -ENOMEM) {
				ftest_assert_ok(ret);
				break;
			}
		}
	}
}

/* ---- written out by hand, as the plasma code will ---- */

FTEST(plasma_create_request_in_a_frame)
{
	struct ferry__wire_plasma_create msg = {.seq = 9,
						.data_size = 1 << 20,
						.metadata_size = 16,
						.copy = FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY};
	struct ferry__wire_plasma_create_view req;
	struct ferry_object_id got;
	struct ferry__fb_builder b = {0};
	struct ferry__frame_parser p;
	struct ferry__frame f;
	const uint8_t *frame;
	size_t size;

	ferry_object_id_random(&msg.object_id);
	msg.owner_id.bytes[15] = 0x42;
	ftest_assert_ok(ferry__wire_plasma_create_build(&b, &msg));
	ftest_assert_ok(ferry__frame_finish(&b, FERRY__WIRE_MSG_PLASMA_CREATE, &frame, &size));

	ferry__frame_parser_init(&p, 0);
	ftest_assert_ok(ferry__frame_parser_feed(&p, frame, size));
	ftest_assert_int_eq(ferry__frame_parser_next(&p, &f), 1);
	ftest_assert_uint_eq(f.type, FERRY__WIRE_MSG_PLASMA_CREATE);
	ftest_assert_ok(ferry__wire_verify(f.type, f.payload, f.length));
	req = ferry__wire_plasma_create_root_verified(f.payload);
	ftest_assert_uint_eq(ferry__wire_plasma_create_seq(req), 9);
	got = ferry__wire_plasma_create_object_id(req);
	ftest_assert_true(ferry_object_id_eq(&got, &msg.object_id));
	ftest_assert_uint_eq(ferry__wire_plasma_create_data_size(req), 1 << 20);
	ftest_assert_uint_eq(ferry__wire_plasma_create_metadata_size(req), 16);
	ftest_assert_uint_eq(ferry__wire_plasma_create_copy(req),
			     FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY);
	ftest_assert_uint_eq(ferry__wire_plasma_create_owner_id(req).bytes[15], 0x42);
	ftest_assert_false(ferry__wire_plasma_create_no_evict(req));
	ferry__frame_parser_fini(&p);
	ferry__fb_builder_fini(&b);
}

FTEST(plasma_get_reply_with_per_object_results)
{
	struct ferry__wire_plasma_object objs[3] = {
		{.status = 0, .offset = 4096, .data_size = 100, .metadata_size = 4},
		{.status = -ETIMEDOUT},
		{.status = -ENOENT},
	};
	struct ferry__wire_plasma_get_reply rep = {.seq = 77, .objects = objs, .objects_count = 3};
	struct ferry__wire_plasma_get_reply_view v;
	struct ferry__fb_builder b = {0};

	for (int i = 0; i < 3; i++)
		ferry_object_id_random(&objs[i].object_id);
	ftest_assert_ok(ferry__wire_plasma_get_reply_build(&b, &rep));
	ftest_assert_ok(ferry__wire_plasma_get_reply_root(ferry__fb_builder_data(&b),
							  ferry__fb_builder_size(&b), &v));
	ftest_assert_uint_eq(ferry__wire_plasma_get_reply_seq(v), 77);
	ftest_assert_uint_eq(ferry__wire_plasma_get_reply_objects_count(v), 3);
	for (uint32_t i = 0; i < 3; i++) {
		struct ferry__wire_plasma_object_view o =
			ferry__wire_plasma_get_reply_objects_at(v, i);
		struct ferry_object_id id = ferry__wire_plasma_object_object_id(o);

		ftest_assert_true(ferry_object_id_eq(&id, &objs[i].object_id));
		ftest_assert_int_eq(ferry__wire_plasma_object_status(o), objs[i].status);
	}
	ftest_assert_uint_eq(
		ferry__wire_plasma_object_offset(ferry__wire_plasma_get_reply_objects_at(v, 0)),
		4096);
	ferry__fb_builder_fini(&b);
}

FTEST(plasma_connect_reply_describes_regions)
{
	struct ferry__wire_plasma_region regions[2] = {
		{.kind = FERRY__WIRE_PLASMA_REGION_KIND_ARENA,
		 .fd_index = 0,
		 .size = 1ull << 30,
		 .hugepage_size = 2 << 20},
		{.kind = FERRY__WIRE_PLASMA_REGION_KIND_INDEX, .fd_index = 1, .size = 1 << 20},
	};
	struct ferry__wire_plasma_connect_reply rep = {.seq = 1,
						       .regions = regions,
						       .regions_count = 2,
						       .arena_size = 1ull << 30,
						       .index_region = 1,
						       .index_offset = 64,
						       .index_capacity = 4096,
						       .index_entry_size = 64,
						       .layout_version = 1,
						       .client_slot = 3,
						       .client_slots_offset = 1 << 18,
						       .client_slot_size = 512,
						       .max_clients = 64,
						       .chunk_offset = 1 << 24,
						       .chunk_size = 1 << 20};
	struct ferry__wire_plasma_connect_reply_view v;
	struct ferry__fb_builder b = {0};

	ftest_assert_ok(ferry__wire_plasma_connect_reply_build(&b, &rep));
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY,
					   ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	v = ferry__wire_plasma_connect_reply_root_verified(ferry__fb_builder_data(&b));
	ftest_assert_uint_eq(ferry__wire_plasma_connect_reply_regions_count(v), 2);
	ftest_assert_uint_eq(ferry__wire_plasma_region_hugepage_size(
				     ferry__wire_plasma_connect_reply_regions_at(v, 0)),
			     2 << 20);
	ftest_assert_uint_eq(
		ferry__wire_plasma_region_kind(ferry__wire_plasma_connect_reply_regions_at(v, 1)),
		FERRY__WIRE_PLASMA_REGION_KIND_INDEX);
	ftest_assert_uint_eq(ferry__wire_plasma_connect_reply_client_slot(v), 3);
	ftest_assert_uint_eq(ferry__wire_plasma_connect_reply_chunk_size(v), 1 << 20);
	ferry__fb_builder_fini(&b);
}

FTEST(plasma_request_without_its_object_id_is_rejected)
{
	struct ferry__wire_plasma_seal msg = {.seq = 1};
	struct ferry__fb_builder b = {0};
	struct raw r;
	uint32_t table;

	ftest_assert_ok(ferry__wire_plasma_seal_build(&b, &msg));
	raw_from_builder(&r, &b);
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_SEAL, r.b, r.len));
	table = ferry__fb_load_u32(r.b);
	raw_u16(&r, raw_vtable(&r, table) + 4 + 2 * 1, 0); /* object_id is field 1 */
	ftest_assert_errno(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_SEAL, r.b, r.len), -EPROTO);
	ferry__fb_builder_fini(&b);
}

FTEST(plasma_get_requires_its_id_vector)
{
	struct ferry__wire_plasma_get msg = {.seq = 1, .timeout_ms = -1};
	struct ferry__fb_builder b = {0};
	struct ferry_object_id none;

	ftest_assert_errno(ferry__wire_plasma_get_build(&b, &msg), -EINVAL);
	msg.object_ids = &none; /* present and empty is fine */
	ftest_assert_ok(ferry__wire_plasma_get_build(&b, &msg));
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_GET, ferry__fb_builder_data(&b),
					   ferry__fb_builder_size(&b)));
	ferry__fb_builder_fini(&b);
}

FTEST(error_reply_carries_a_message)
{
	struct ferry__wire_error_reply msg = {.code = -EPROTO,
					      .message = "bad request",
					      .request_seq = 5,
					      .request_type = FERRY__WIRE_MSG_PLASMA_GET};
	struct ferry__wire_error_reply_view v;
	struct ferry__fb_builder b = {0};

	ftest_assert_ok(ferry__wire_error_reply_build(&b, &msg));
	ftest_assert_ok(ferry__wire_error_reply_root(ferry__fb_builder_data(&b),
						     ferry__fb_builder_size(&b), &v));
	ftest_assert_int_eq(ferry__wire_error_reply_code(v), -EPROTO);
	ftest_assert_str_eq(ferry__wire_error_reply_message(v), "bad request");
	ftest_assert_uint_eq(ferry__wire_error_reply_message_len(v), 11);
	ftest_assert_uint_eq(ferry__wire_error_reply_request_type(v), FERRY__WIRE_MSG_PLASMA_GET);
	ferry__fb_builder_fini(&b);
}

FTEST(list_reply_with_more_tables_than_the_fixed_limit_verifies)
{
	size_t n = FERRY_FB_MAX_TABLES + 1000;
	struct ferry__wire_plasma_object_info *objs = calloc(n, sizeof(*objs));
	struct ferry__wire_plasma_list_reply rep = {.seq = 1, .objects = objs, .objects_count = n};
	struct ferry__fb_builder b = {0};
	struct ferry__wire_plasma_list_reply_view v;

	ftest_assert_ptr_notnull(objs);
	for (size_t i = 0; i < n; i++)
		objs[i].data_size = i;
	ftest_assert_ok(ferry__wire_plasma_list_reply_build(&b, &rep));
	ftest_assert_ok(ferry__wire_plasma_list_reply_root(ferry__fb_builder_data(&b),
							   ferry__fb_builder_size(&b), &v));
	ftest_assert_uint_eq(ferry__wire_plasma_list_reply_objects_count(v), n);
	ftest_assert_uint_eq(ferry__wire_plasma_object_info_data_size(
				     ferry__wire_plasma_list_reply_objects_at(v, (uint32_t)n - 1)),
			     n - 1);
	ferry__fb_builder_fini(&b);
	free(objs);
}
