/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes the wire fuzz target's seed corpus (tests/fuzz/corpus/wire/): valid frames of every
 * message type (generated samples: all absent, schema defaults, a random one), a stream of
 * many frames, and malformed inputs (bad header fields, truncation, corrupted payloads,
 * hand-made bad offsets). Deterministic: rerunning it rewrites the same files. It touches
 * only files named valid-* and bad-*, so crash regressions (regress-*) stay.
 *
 *   ninja -C BUILD wire-corpus      (or: make_wire_corpus DIR)
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "schema/ferry_schema_testgen.h"

static _Alignas(16) uint8_t value[4096];
static _Alignas(16) uint8_t pool_mem[1 << 20];
static const char *out_dir;
static int written;

static void write_file(const char *name, const uint8_t *data, size_t size)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out_dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
	written++;
}

/* Remove what an earlier run wrote (valid-*, bad-*), so that the corpus is exactly this run's
 * output plus the crash regressions. */
static void remove_old_seeds(void)
{
	DIR *d = opendir(out_dir);
	struct dirent *e;
	char path[4096];

	if (!d) {
		perror(out_dir);
		exit(1);
	}
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "valid-", 6) != 0 && strncmp(e->d_name, "bad-", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", out_dir, e->d_name);
		if (unlink(path) != 0) {
			perror(path);
			exit(1);
		}
	}
	closedir(d);
}

/* The frame of a sample of message @type from @seed, in @b (valid until its next build). */
static const uint8_t *sample_frame(struct ferry__fb_builder *b, uint16_t type, uint32_t seed,
				   size_t *size)
{
	const struct ferry__wire_test_table *t = ferry__wire_test_table_for_type(type);
	struct ferry__wire_test_pool pool = {pool_mem, sizeof(pool_mem), 0};
	const uint8_t *frame;

	if (!t || t->sample(&pool, seed, value) || t->build(b, value) ||
	    ferry__frame_finish(b, type, &frame, size)) {
		fprintf(stderr, "cannot build a sample of type %u\n", type);
		exit(1);
	}
	return frame;
}

/* A struct-framed message (DataChunk): its struct, then 0, 7 and 200 raw bytes. Writes the
 * files and copies the last frame to @out (up to @room bytes); returns the bytes copied. */
static size_t framed_frames(const struct ferry__fb_message_info *m, uint8_t *out, size_t room)
{
	static const size_t extra[] = {0, 7, 200};
	uint8_t payload[512], *frame = NULL;
	size_t size = 0, copied = 0;
	char name[128];

	for (size_t k = 0; k < sizeof(extra) / sizeof(extra[0]); k++) {
		for (size_t j = 0; j < m->framed_bytes + extra[k]; j++)
			payload[j] = (uint8_t)(j * 13 + k);
		ferry__free(frame);
		if (ferry__frame_pack(m->type, payload, m->framed_bytes + extra[k], &frame,
				      &size)) {
			fprintf(stderr, "frame_pack failed\n");
			exit(1);
		}
		snprintf(name, sizeof(name), "valid-%s-%zu", m->name, k);
		write_file(name, frame, size);
	}
	if (size <= room) {
		memcpy(out, frame, size);
		copied = size;
	}
	ferry__free(frame);
	return copied;
}

static void valid_frames(struct ferry__fb_builder *b)
{
	static uint8_t stream[1 << 16];
	size_t stream_size = 0, size;
	char name[128];

	for (size_t i = 0; i < ferry__wire_message_count; i++) {
		const struct ferry__fb_message_info *m = &ferry__wire_messages[i];

		if (m->framed_bytes) {
			stream_size += framed_frames(m, stream + stream_size,
						     sizeof(stream) - stream_size);
			continue;
		}
		for (uint32_t seed = 0; seed < 3; seed++) {
			const uint8_t *frame = sample_frame(b, m->type, seed, &size);

			snprintf(name, sizeof(name), "valid-%s-%u", m->name, seed);
			write_file(name, frame, size);
		}
		sample_frame(b, m->type, 5, &size);
		if (stream_size + size <= sizeof(stream)) {
			memcpy(stream + stream_size, ferry__fb_builder_headroom(b), size);
			stream_size += size;
		}
	}
	write_file("valid-stream", stream, stream_size);
}

/* A frame of @type around a hand-made payload. */
static void bad_payload(const char *name, uint16_t type, const uint8_t *payload, size_t len)
{
	uint8_t *frame;
	size_t size;

	if (ferry__frame_pack(type, payload, len, &frame, &size)) {
		fprintf(stderr, "frame_pack failed\n");
		exit(1);
	}
	write_file(name, frame, size);
	ferry__free(frame);
}

static void bad_headers(struct ferry__fb_builder *b)
{
	uint8_t frame[4096];
	const uint8_t *src;
	size_t size;

	src = sample_frame(b, FERRY__WIRE_MSG_HANDSHAKE, 2, &size);
	memcpy(frame, src, size);
	frame[0] = 0xFD;
	write_file("bad-magic", frame, size);
	frame[0] = 0xFE;
	frame[1] = 2;
	write_file("bad-version", frame, size);
	frame[1] = 1;
	ferry__fb_store_u16(frame + 2, 4242);
	write_file("bad-unknown-type", frame, size);
	ferry__frame_header_encode(frame, FERRY__WIRE_MSG_PLASMA_GET, (2u << 20));
	write_file("bad-oversize-length", frame, FERRY_FRAME_HEADER_SIZE + 16);
	write_file("bad-truncated-header", frame, 5);
	src = sample_frame(b, FERRY__WIRE_MSG_PLASMA_GET_REPLY, 2, &size);
	memcpy(frame, src, size);
	write_file("bad-truncated-payload", frame, size - 3);
}

/* Valid frames with a few bytes of their payload flipped (deterministically). */
static void corrupted_frames(struct ferry__fb_builder *b)
{
	uint8_t frame[4096];
	uint32_t rng = 1;
	char name[128];

	for (size_t i = 0; i < ferry__wire_message_count; i++) {
		const struct ferry__fb_message_info *m = &ferry__wire_messages[i];
		const uint8_t *src;
		size_t size;

		if (m->framed_bytes)
			continue; /* any bytes are a valid DataChunk payload past its struct */
		src = sample_frame(b, m->type, 3, &size);
		memcpy(frame, src, size);
		for (int k = 0; k < 3 && size > FERRY_FRAME_HEADER_SIZE; k++) {
			rng = rng * 1103515245u + 12345u;
			frame[FERRY_FRAME_HEADER_SIZE +
			      (rng >> 8) % (size - FERRY_FRAME_HEADER_SIZE)] ^=
				(uint8_t)(rng >> 24);
		}
		snprintf(name, sizeof(name), "bad-corrupt-%s", m->name);
		write_file(name, frame, size);
	}
}

static void hand_made(void)
{
	/* root offset past the end; vtable before the buffer; a field offset that wraps */
	static const uint8_t root_oob[] = {0xf0, 0, 0, 0, 4, 0, 4, 0};
	static const uint8_t vtable_oob[] = {4, 0, 0, 0, 0x40, 0, 0, 0};
	static const uint8_t wrap[] = {12, 0, 0, 0, 6, 0, 8,	0,    4,    0,
				       0,  0, 8, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff};
	/* a vector count whose byte size overflows 32 bits */
	static const uint8_t count[] = {12, 0, 0, 0, 6, 0, 8, 0, 4, 0, 0, 0,
					8,  0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0x20};

	bad_payload("bad-root-offset", FERRY__WIRE_MSG_PLASMA_GET, root_oob, sizeof(root_oob));
	bad_payload("bad-vtable", FERRY__WIRE_MSG_PLASMA_GET, vtable_oob, sizeof(vtable_oob));
	bad_payload("bad-offset-wrap", FERRY__WIRE_MSG_ERROR_REPLY, wrap, sizeof(wrap));
	bad_payload("bad-vector-count", FERRY__WIRE_MSG_PLASMA_DELETE_REPLY, count, sizeof(count));
	bad_payload("bad-empty-payload", FERRY__WIRE_MSG_PLASMA_STATS, NULL, 0);
}

int main(int argc, char **argv)
{
	struct ferry__fb_builder b;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	out_dir = argv[1];
	remove_old_seeds();
	ferry__fb_builder_init(&b);
	valid_frames(&b);
	bad_headers(&b);
	corrupted_frames(&b);
	hand_made();
	ferry__fb_builder_fini(&b);
	printf("wrote %d files to %s\n", written, out_dir);
	return 0;
}
