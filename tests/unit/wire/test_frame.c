/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framing: the header codec, the incremental parser fed byte by byte and in random pieces,
 * bad and oversize headers, truncation, allocation failures while growing, and the send side
 * (frames built in the builder's headroom, packed copies, partial writes).
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

/* A stream of frames: one per message type and seed, concatenated. */
struct stream {
	uint8_t *data;	      /* malloc'd */
	size_t size;	      /* bytes */
	size_t frames;	      /* how many */
	size_t offsets[1024]; /* where each frame starts (seeds x message types) */
};

static void append(struct stream *s, const uint8_t *frame, size_t size)
{
	ftest_assert_uint_lt(s->frames, sizeof(s->offsets) / sizeof(s->offsets[0]));
	s->data = realloc(s->data, s->size + size);
	ftest_assert_ptr_notnull(s->data);
	memcpy(s->data + s->size, frame, size);
	s->offsets[s->frames++] = s->size;
	s->size += size;
}

static void make_stream(struct stream *s, uint32_t seeds)
{
	struct ferry__fb_builder b = {0};

	memset(s, 0, sizeof(*s));
	for (uint32_t seed = 0; seed < seeds; seed++) {
		for (size_t i = 0; i < ferry__wire_message_count; i++) {
			uint16_t type = ferry__wire_messages[i].type;
			const struct ferry__wire_test_table *t =
				ferry__wire_test_table_for_type(type);

			if (ferry__wire_messages[i].framed_bytes)
				continue; /* no table to sample */
			struct ferry__wire_test_pool pool = {space.pool, sizeof(space.pool), 0};
			const uint8_t *frame;
			size_t size;

			ftest_assert_ok(t->sample(&pool, seed, space.value));
			ftest_assert_ok(t->build(&b, space.value));
			ftest_assert_ok(ferry__frame_finish(&b, type, &frame, &size));
			append(s, frame, size);
		}
	}
	ferry__fb_builder_fini(&b);
}

/* Check every frame the parser has ready against the stream; returns how many. */
static size_t drain(struct ferry__frame_parser *p, const struct stream *s, size_t seen)
{
	struct ferry__frame f;
	int ret;

	while ((ret = ferry__frame_parser_next(p, &f)) == 1) {
		const uint8_t *want = s->data + s->offsets[seen];
		struct ferry__frame_header h;

		ftest_assert_uint_lt(seen, s->frames);
		ftest_assert_ok(ferry__frame_header_decode(want, UINT32_MAX, &h));
		ftest_assert_uint_eq(f.type, h.type);
		ftest_assert_uint_eq(f.length, h.length);
		ftest_assert_mem_eq(f.payload, want + FERRY_FRAME_HEADER_SIZE, f.length);
		ftest_assert_ok(ferry__wire_verify(f.type, f.payload, f.length));
		seen++;
	}
	ftest_assert_ok(ret);
	return seen;
}

FTEST(header_round_trip_and_layout)
{
	uint8_t h[FERRY_FRAME_HEADER_SIZE];
	struct ferry__frame_header out;

	ferry__frame_header_encode(h, FERRY__WIRE_MSG_PLASMA_GET, 0x01020304);
	ftest_assert_uint_eq(h[0], 0xFE);
	ftest_assert_uint_eq(h[1], 1);
	ftest_assert_uint_eq(h[2], FERRY__WIRE_MSG_PLASMA_GET);
	ftest_assert_uint_eq(h[3], 0);
	ftest_assert_uint_eq(h[4], 0x04);
	ftest_assert_uint_eq(h[7], 0x01);
	ftest_assert_ok(ferry__frame_header_decode(h, UINT32_MAX, &out));
	ftest_assert_uint_eq(out.type, FERRY__WIRE_MSG_PLASMA_GET);
	ftest_assert_uint_eq(out.length, 0x01020304);
}

FTEST(bad_headers_are_rejected)
{
	static const uint16_t unknown[] = {0, 4, 31, 1000, UINT16_MAX};
	uint8_t h[FERRY_FRAME_HEADER_SIZE];
	struct ferry__frame_header out;

	ferry__frame_header_encode(h, FERRY__WIRE_MSG_HANDSHAKE, 100);
	ftest_assert_ok(ferry__frame_header_decode(h, 100, &out));
	ftest_assert_errno(ferry__frame_header_decode(h, 99, &out), -EPROTO);
	h[0] = 0xFD;
	ftest_assert_errno(ferry__frame_header_decode(h, 100, &out), -EPROTO);
	h[0] = 0xFE;
	h[1] = 2;
	ftest_assert_errno(ferry__frame_header_decode(h, 100, &out), -EPROTO);
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		ferry__frame_header_encode(h, unknown[i], 0);
		ftest_assert_errno(ferry__frame_header_decode(h, 100, &out), -EPROTO);
	}
}

FTEST(parser_fed_byte_by_byte)
{
	struct ferry__frame_parser p;
	struct stream s;
	size_t seen = 0;

	make_stream(&s, 3);
	ferry__frame_parser_init(&p, 0);
	for (size_t i = 0; i < s.size; i++) {
		ftest_assert_ok(ferry__frame_parser_feed(&p, s.data + i, 1));
		seen = drain(&p, &s, seen);
	}
	ftest_assert_uint_eq(seen, s.frames);
	ftest_assert_uint_eq(ferry__frame_parser_pending(&p), 0);
	ferry__frame_parser_fini(&p);
	free(s.data);
}

FTEST(parser_fed_in_random_pieces)
{
	struct stream s;
	uint64_t rng = 7;

	make_stream(&s, 4);
	for (int round = 0; round < 60; round++) {
		struct ferry__frame_parser p;
		size_t seen = 0, at = 0;

		ferry__frame_parser_init(&p, 0);
		while (at < s.size) {
			size_t n;

			rng = rng * 6364136223846793005u + 1442695040888963407u;
			n = 1 + (rng >> 33) % (round % 3 == 0 ? 7 : 600);
			if (n > s.size - at)
				n = s.size - at;
			ftest_assert_ok(ferry__frame_parser_feed(&p, s.data + at, n));
			at += n;
			seen = drain(&p, &s, seen);
		}
		ftest_assert_uint_eq(seen, s.frames);
		ferry__frame_parser_fini(&p);
	}
	free(s.data);
}

/* The zero-copy path a connection uses: read straight into the parser's space. */
FTEST(parser_space_and_commit_with_short_reads)
{
	struct ferry__frame_parser p;
	struct stream s;
	size_t seen = 0, at = 0;

	make_stream(&s, 2);
	ferry__frame_parser_init(&p, 0);
	while (at < s.size) {
		uint8_t *space_ptr;
		size_t room, n;

		ftest_assert_ok(ferry__frame_parser_space(&p, &space_ptr, &room));
		ftest_assert_uint_gt(room, 0);
		n = s.size - at < room ? s.size - at : room;
		n = n > 37 ? 37 : n; /* short reads */
		memcpy(space_ptr, s.data + at, n);
		ferry__frame_parser_commit(&p, n);
		at += n;
		seen = drain(&p, &s, seen);
	}
	ftest_assert_uint_eq(seen, s.frames);
	ferry__frame_parser_fini(&p);
	free(s.data);
}

FTEST(large_frame_grows_the_buffer_then_gives_it_back)
{
	size_t len = 3u << 20;
	uint8_t *payload = calloc(1, len);
	uint8_t *frame, *space_ptr;
	size_t size, room;
	struct ferry__frame_parser p;
	struct ferry__frame f;

	ftest_assert_ptr_notnull(payload);
	payload[len - 1] = 0x5a;
	ftest_assert_ok(
		ferry__frame_pack(FERRY__WIRE_MSG_ERROR_REPLY, payload, len, &frame, &size));
	ferry__frame_parser_init(&p, 4u << 20);
	ftest_assert_ok(ferry__frame_parser_feed(&p, frame, FERRY_FRAME_HEADER_SIZE));
	ftest_assert_int_eq(ferry__frame_parser_next(&p, &f), 0);
	/* once the header is in, the space offered fits the whole frame: one read suffices */
	ftest_assert_ok(ferry__frame_parser_space(&p, &space_ptr, &room));
	ftest_assert_uint_ge(room, len);
	memcpy(space_ptr, frame + FERRY_FRAME_HEADER_SIZE, len);
	ferry__frame_parser_commit(&p, len);
	ftest_assert_int_eq(ferry__frame_parser_next(&p, &f), 1);
	ftest_assert_uint_eq(f.length, len);
	ftest_assert_uint_eq(f.payload[len - 1], 0x5a);
	ftest_assert_ok(ferry__frame_parser_space(&p, &space_ptr, &room));
	ftest_assert_uint_lt(p.cap, 1u << 20);
	ferry__frame_parser_fini(&p);
	ferry__free(frame);
	free(payload);
}

FTEST(oversize_frame_is_refused_at_its_header_and_the_error_sticks)
{
	uint8_t h[FERRY_FRAME_HEADER_SIZE], *space_ptr;
	struct ferry__frame_parser p;
	struct ferry__frame f;
	size_t room;

	ferry__frame_parser_init(&p, 1000);
	ferry__frame_header_encode(h, FERRY__WIRE_MSG_PLASMA_GET, 1001);
	ftest_assert_ok(ferry__frame_parser_feed(&p, h, sizeof(h)));
	ftest_assert_errno(ferry__frame_parser_next(&p, &f), -EPROTO);
	ftest_assert_errno(ferry__frame_parser_next(&p, &f), -EPROTO);
	ftest_assert_errno(ferry__frame_parser_feed(&p, h, sizeof(h)), -EPROTO);
	ftest_assert_errno(ferry__frame_parser_space(&p, &space_ptr, &room), -EPROTO);
	ferry__frame_parser_fini(&p);
}

FTEST(garbage_and_unknown_types_are_refused)
{
	static const uint8_t garbage[] = "GET / HTTP/1.1\r\n\r\n";
	uint8_t h[FERRY_FRAME_HEADER_SIZE];
	struct ferry__frame_parser p;
	struct ferry__frame f;

	ferry__frame_parser_init(&p, 0);
	ftest_assert_ok(ferry__frame_parser_feed(&p, garbage, sizeof(garbage)));
	ftest_assert_errno(ferry__frame_parser_next(&p, &f), -EPROTO);
	ferry__frame_parser_fini(&p);

	ferry__frame_parser_init(&p, 0);
	ferry__frame_header_encode(h, 999, 0);
	ftest_assert_ok(ferry__frame_parser_feed(&p, h, sizeof(h)));
	ftest_assert_errno(ferry__frame_parser_next(&p, &f), -EPROTO);
	ferry__frame_parser_fini(&p);
}

FTEST(truncated_stream_leaves_bytes_pending)
{
	struct ferry__frame_parser p;
	struct ferry__frame f;
	struct stream s;

	make_stream(&s, 1);
	ferry__frame_parser_init(&p, 0);
	ftest_assert_ok(ferry__frame_parser_feed(&p, s.data, s.offsets[1] - 1));
	ftest_assert_int_eq(ferry__frame_parser_next(&p, &f), 0);
	ftest_assert_uint_eq(ferry__frame_parser_pending(&p), s.offsets[1] - 1);
	ferry__frame_parser_fini(&p);
	free(s.data);
}

FTEST(empty_payload_frame_is_delivered)
{
	uint8_t h[FERRY_FRAME_HEADER_SIZE];
	struct ferry__frame_parser p;
	struct ferry__frame f;

	ferry__frame_parser_init(&p, 0);
	ferry__frame_header_encode(h, FERRY__WIRE_MSG_PLASMA_STATS, 0);
	ftest_assert_ok(ferry__frame_parser_feed(&p, h, sizeof(h)));
	ftest_assert_int_eq(ferry__frame_parser_next(&p, &f), 1);
	ftest_assert_uint_eq(f.length, 0);
	/* ...which is not a valid message: verification is the next step's job */
	ftest_assert_errno(ferry__wire_verify(f.type, f.payload, f.length), -EPROTO);
	ferry__frame_parser_fini(&p);
}

FTEST(space_failing_to_grow_loses_nothing)
{
	struct ferry__frame_parser p;
	struct stream s;
	size_t seen = 0, at = 0;
	int failures = 0, attempt = 0;

	make_stream(&s, 2);
	ferry__frame_parser_init(&p, 0);
	while (at < s.size) {
		uint8_t *space_ptr;
		size_t room, n;

		/* every other call: its allocation (if it makes one) fails */
		ferry__alloc_fail_after(attempt++ % 2 ? -1 : 0);
		if (ferry__frame_parser_space(&p, &space_ptr, &room) == -ENOMEM) {
			failures++;
			ferry__alloc_fail_after(-1);
			continue; /* nothing lost: try again */
		}
		ferry__alloc_fail_after(-1);
		n = s.size - at < room ? s.size - at : room;
		memcpy(space_ptr, s.data + at, n);
		ferry__frame_parser_commit(&p, n);
		at += n;
		seen = drain(&p, &s, seen);
	}
	ftest_assert_uint_eq(seen, s.frames);
	ftest_assert_int_ge(failures, 1);
	ferry__frame_parser_fini(&p);
	free(s.data);
}

FTEST(feed_under_oom_at_every_allocation)
{
	struct stream s;

	make_stream(&s, 2);
	for (long n = 0;; n++) {
		struct ferry__frame_parser p;
		int ret;

		ferry__frame_parser_init(&p, 0);
		ferry__alloc_fail_after(n);
		ret = ferry__frame_parser_feed(&p, s.data, s.size);
		ferry__alloc_fail_after(-1);
		if (ret == -ENOMEM) {
			ferry__frame_parser_fini(&p);
			continue;
		}
		ftest_assert_ok(ret);
		ftest_assert_uint_eq(drain(&p, &s, 0), s.frames);
		ferry__frame_parser_fini(&p);
		break;
	}
	free(s.data);
}

FTEST(frame_finish_needs_a_finished_message)
{
	struct ferry__fb_builder b = {0};
	const uint8_t *frame;
	size_t size;

	ftest_assert_errno(ferry__frame_finish(&b, FERRY__WIRE_MSG_HANDSHAKE, &frame, &size),
			   -EINVAL);
}

FTEST(frame_pack_and_partial_writes)
{
	static const uint8_t payload[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
	uint8_t *frame, out[64];
	size_t size, written = 0;
	struct ferry__frame_out o;
	struct ferry__frame_header h;

	ftest_assert_ok(ferry__frame_pack(FERRY__WIRE_MSG_ERROR_REPLY, payload, sizeof(payload),
					  &frame, &size));
	ftest_assert_uint_eq(size, FERRY_FRAME_HEADER_SIZE + sizeof(payload));
	o = (struct ferry__frame_out){frame, size, 0};
	for (;;) {
		const uint8_t *next;
		size_t left = ferry__frame_out_remaining(&o, &next), n = left < 3 ? left : 3;

		memcpy(out + written, next, n);
		written += n;
		if (ferry__frame_out_advance(&o, n))
			break;
	}
	ftest_assert_uint_eq(written, size);
	ftest_assert_ok(ferry__frame_header_decode(out, 100, &h));
	ftest_assert_uint_eq(h.length, sizeof(payload));
	ftest_assert_mem_eq(out + FERRY_FRAME_HEADER_SIZE, payload, sizeof(payload));
	ftest_assert_true(ferry__frame_out_advance(&o, 100)); /* never past the end */
	ftest_assert_uint_eq(o.done, size);
	ferry__free(frame);
	ftest_assert_errno(
		ferry__frame_pack(FERRY__WIRE_MSG_ERROR_REPLY, payload, UINT32_MAX, &frame, &size),
		-E2BIG);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(
		ferry__frame_pack(FERRY__WIRE_MSG_ERROR_REPLY, payload, 1, &frame, &size), -ENOMEM);
}
