/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the object store's request decoder and handlers: the input is the byte
 * stream a client would send after PlasmaConnect. It goes through the frame parser (fed in
 * pieces whose sizes derive from the input) and the verifier, and every request that verifies
 * is handled by a real server core (a small store, no socket) exactly as one from a socket
 * would be: creates, seals, gets that wait, deletes, lists... Per input, a fresh store; at the
 * end the client is cleaned up as if it had died, and nothing may leak.
 *
 * Built with FUZZ_PLASMA_REPLAY, it is its own corpus replay (suite fuzz):
 *   fuzz_plasma_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_plasma_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD plasma-corpus)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "plasma/server_int.h"

#define FUZZ_MAX_LENGTH (1u << 20)

#include "fuzz_replay.h"

static struct ferry__plasma_pclient *connected_client(struct ferry__plasma_server *srv)
{
	struct ferry__wire_plasma_connect m = {.seq = 1, .pid = 1, .name = "fuzz"};
	struct ferry__plasma_pclient *c = ferry__plasma_client_new(srv, NULL);
	struct ferry__fb_builder b = {0};

	if (c && ferry__wire_plasma_connect_build(&b, &m) == 0)
		ferry__plasma_handle(c, FERRY__WIRE_MSG_PLASMA_CONNECT, ferry__fb_builder_data(&b),
				     ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	return c;
}

static void feed(struct ferry__plasma_pclient *c, const uint8_t *data, size_t size)
{
	struct ferry__frame_parser p;
	struct ferry__frame f;
	uint32_t rng = (uint32_t)size * 2654435761u;
	size_t at = 0;
	int ret = 0;

	ferry__frame_parser_init(&p, FUZZ_MAX_LENGTH);
	while (at < size && ret >= 0 && !c->closing) {
		size_t n;

		rng = rng * 1103515245u + 12345u;
		n = 1 + (rng >> 16) % 97;
		if (n > size - at)
			n = size - at;
		if (ferry__frame_parser_feed(&p, data + at, n))
			break;
		at += n;
		while (!c->closing && (ret = ferry__frame_parser_next(&p, &f)) == 1) {
			/* As the connection layer does: a payload that does not verify closes. */
			if (ferry__wire_verify(f.type, f.payload, f.length) < 0)
				break;
			ferry__plasma_handle(c, f.type, f.payload, f.length);
		}
	}
	ferry__frame_parser_fini(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct ferry__plasma_server_opts o = {
		.memory_bytes = 1 << 20,
		.max_objects = 64,
		.max_clients = 4,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT | FERRY__PLASMA_STORE_POISON,
	};
	struct ferry__plasma_server *srv;
	struct ferry__plasma_pclient *c;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	if (ferry__plasma_server_create(&o, &srv) < 0)
		return 0;
	c = connected_client(srv);
	if (c) {
		feed(c, data, size);
		ferry__plasma_client_free(c);
	}
	ferry__plasma_server_destroy(srv);
	return 0;
}

#ifdef FUZZ_PLASMA_REPLAY

/* ---- seeds ---- */

struct seed {
	FILE *f; /* the seed being written */
};

static void emit(struct seed *s, uint16_t type, struct ferry__fb_builder *b, int built)
{
	const uint8_t *frame;
	size_t size;

	if (built < 0 || ferry__frame_finish(b, type, &frame, &size) < 0 ||
	    fwrite(frame, 1, size, s->f) != size) {
		fprintf(stderr, "cannot build a seed frame of type %u\n", type);
		exit(1);
	}
}

static struct ferry_object_id id_of(uint8_t n)
{
	struct ferry_object_id id;

	memset(id.bytes, n, sizeof(id.bytes));
	return id;
}

#define EMIT(s, b, name, TYPE, ...)                                                           \
	do {                                                                                  \
		struct ferry__wire_##name m_ = __VA_ARGS__;                                   \
		emit((s), FERRY__WIRE_MSG_##TYPE, (b), ferry__wire_##name##_build((b), &m_)); \
	} while (0)

static void seed_lifecycle(struct seed *s, struct ferry__fb_builder *b)
{
	struct ferry_object_id ids[2] = {id_of(1), id_of(2)};

	EMIT(s, b, plasma_create, PLASMA_CREATE,
	     {.seq = 2,
	      .object_id = ids[0],
	      .data_size = 100,
	      .metadata_size = 8,
	      .chunk_size = 4096});
	EMIT(s, b, plasma_seal, PLASMA_SEAL, {.seq = 3, .object_id = ids[0]});
	EMIT(s, b, plasma_get, PLASMA_GET, {.seq = 4, .object_ids = ids, .object_ids_count = 2});
	EMIT(s, b, plasma_release, PLASMA_RELEASE, {.seq = 5, .object_id = ids[0], .count = 1});
	EMIT(s, b, plasma_contains, PLASMA_CONTAINS, {.seq = 6, .object_id = ids[0]});
	EMIT(s, b, plasma_delete, PLASMA_DELETE,
	     {.seq = 7, .object_ids = ids, .object_ids_count = 2});
}

static void seed_waits(struct seed *s, struct ferry__fb_builder *b)
{
	struct ferry_object_id ids[3] = {id_of(3), id_of(4), id_of(3)};

	EMIT(s, b, plasma_get, PLASMA_GET,
	     {.seq = 2, .object_ids = ids, .object_ids_count = 3, .timeout_ms = 1000});
	EMIT(s, b, plasma_wait, PLASMA_WAIT,
	     {.seq = 3,
	      .object_ids = ids,
	      .object_ids_count = 2,
	      .num_ready = 1,
	      .timeout_ms = -1});
	EMIT(s, b, plasma_create, PLASMA_CREATE,
	     {.seq = 4, .object_id = ids[0], .data_size = 300000, .copy = 1});
	EMIT(s, b, plasma_seal, PLASMA_SEAL, {.seq = 0, .object_id = ids[0]});
	EMIT(s, b, plasma_abort, PLASMA_ABORT, {.seq = 5, .object_id = ids[1]});
}

static void seed_admin(struct seed *s, struct ferry__fb_builder *b)
{
	EMIT(s, b, plasma_create, PLASMA_CREATE,
	     {.seq = 2, .object_id = id_of(5), .data_size = 2 << 20});
	EMIT(s, b, plasma_create, PLASMA_CREATE,
	     {.seq = 3, .object_id = id_of(6), .data_size = 1, .metadata_size = 1ull << 33});
	EMIT(s, b, plasma_evict, PLASMA_EVICT, {.seq = 4, .bytes = 1 << 19});
	EMIT(s, b, plasma_list, PLASMA_LIST,
	     {.seq = 5, .max_objects = 2, .include_unsealed = true});
	EMIT(s, b, plasma_stats, PLASMA_STATS, {.seq = 6});
	EMIT(s, b, plasma_subscribe, PLASMA_SUBSCRIBE, {.seq = 7, .event_mask = 3});
	EMIT(s, b, plasma_release, PLASMA_RELEASE,
	     {.seq = 0, .object_id = id_of(5), .local = true});
	EMIT(s, b, plasma_disconnect, PLASMA_DISCONNECT, {.seq = 8});
	EMIT(s, b, plasma_stats, PLASMA_STATS, {.seq = 9});
}

int fuzz_make_corpus(const char *dir)
{
	static const struct {
		const char *name;					 /* file */
		void (*fn)(struct seed *s, struct ferry__fb_builder *b); /* its frames */
	} seeds[] = {
		{"seed-lifecycle", seed_lifecycle},
		{"seed-waits", seed_waits},
		{"seed-admin", seed_admin},
	};
	struct ferry__fb_builder b = {0};

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		char path[4096];
		struct seed s;

		snprintf(path, sizeof(path), "%s/%s", dir, seeds[i].name);
		s.f = fopen(path, "wb");
		if (!s.f) {
			perror(path);
			return 1;
		}
		seeds[i].fn(&s, &b);
		fclose(s.f);
	}
	ferry__fb_builder_fini(&b);
	return 0;
}

#endif
