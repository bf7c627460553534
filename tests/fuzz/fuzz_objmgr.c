/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the object manager's decoders. An input starting with 'A' is a node
 * address (the GCS record's text, parsed strictly; what parses must format and parse back to
 * the same). Any other input is one message as an engine hands it over (ferry__objmgr_unwrap:
 * the common frame decode), and a byte stream of frames as a puller would send them: each goes
 * through the serving side's check and, when it is a PullRequest, its reply is built against a
 * fake object of a few hundred bytes held in its own allocation, so that ASan catches any read
 * outside the object (the arena, in the real server).
 *
 * Built with FUZZ_OBJMGR_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_objmgr_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_objmgr_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD objmgr-corpus)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "transport/objmgr_int.h"

#define FUZZ_MAX_LENGTH (1u << 20)
#define FAKE_SIZE 300

#include "fuzz_replay.h"

static void fuzz_address(const uint8_t *data, size_t size)
{
	struct ferry__node_addr a, b;
	char text[FERRY__NODE_ADDR_MAX];
	int n;

	if (ferry__node_addr_parse((const char *)data, size, &a) < 0)
		return;
	n = ferry__node_addr_format(&a, text, sizeof(text));
	if (n < 0 || ferry__node_addr_parse(text, (size_t)n, &b) < 0 || memcmp(&a, &b, sizeof(a)))
		abort(); /* what we accept we must be able to advertise unchanged */
}

static void serve(const struct ferry__frame *f, const struct ferry_plasma_view *obj)
{
	struct ferry__fb_builder b = {0};
	uint64_t sent = 0;

	if (ferry__objmgr_request_check(f->type, f->payload, f->length) < 0 ||
	    f->type != FERRY__WIRE_MSG_PULL_REQUEST)
		return;
	(void)ferry__objmgr_reply_build(&b, f->payload, obj, 0, &sent);
	if (sent > obj->data_size)
		abort();
	ferry__fb_builder_fini(&b);
}

static void fuzz_frames(const uint8_t *data, size_t size)
{
	struct ferry_plasma_view obj = {0};
	struct ferry__frame_parser p;
	struct ferry__frame f;
	uint8_t *bytes = ferry__malloc(FAKE_SIZE + 4);
	const void *payload;
	size_t plen;
	int ret;

	if (!bytes)
		return;
	memset(bytes, 0x5a, FAKE_SIZE + 4);
	obj.data = bytes;
	obj.data_size = FAKE_SIZE;
	obj.metadata = bytes + FAKE_SIZE;
	obj.metadata_size = 4;
	/* The whole input as one message of an engine (an RDMA SEND, a TCP on_message frame):
	 * the decoder both engines share. */
	if (ferry__objmgr_unwrap_request(data, size, &f.type, &payload, &plen) == 0) {
		f.payload = payload;
		f.length = (uint32_t)plen;
		serve(&f, &obj);
	}
	ferry__frame_parser_init(&p, FUZZ_MAX_LENGTH);
	ret = ferry__frame_parser_feed(&p, data, size);
	while (ret >= 0 && (ret = ferry__frame_parser_next(&p, &f)) == 1)
		serve(&f, &obj);
	ferry__frame_parser_fini(&p);
	ferry__free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	if (size && data[0] == 'A')
		fuzz_address(data + 1, size - 1);
	else
		fuzz_frames(data, size);
	return 0;
}

#ifdef FUZZ_OBJMGR_REPLAY

/* ---- seeds ---- */

static int write_request(FILE *f, struct ferry__fb_builder *b, uint64_t offset, uint64_t len,
			 bool want_inline)
{
	struct ferry__wire_pull_request m = {.xfer = 1, .offset = offset, .len = len};
	const uint8_t *frame;
	size_t size;

	/* Not inline: an odd length asks for a TCP stream, an even one for RDMA (refused). */
	m.stream = !want_inline && (len & 1);
	m.object_id.bytes[0] = 7;
	m.want_inline = want_inline;
	if (ferry__wire_pull_request_build(b, &m) < 0 ||
	    ferry__frame_finish(b, FERRY__WIRE_MSG_PULL_REQUEST, &frame, &size) < 0)
		return -1;
	return fwrite(frame, 1, size, f) == size ? 0 : -1;
}

static int seed_requests(FILE *f, struct ferry__fb_builder *b)
{
	int ret = 0;

	ret |= write_request(f, b, 0, 65536, true);	      /* probe: clipped to the object */
	ret |= write_request(f, b, 100, 50, true);	      /* a chunk */
	ret |= write_request(f, b, FAKE_SIZE, 0, true);	      /* empty range at the end */
	ret |= write_request(f, b, FAKE_SIZE + 1, 1, true);   /* offset past the end */
	ret |= write_request(f, b, UINT64_MAX - 2, 10, true); /* wraps */
	ret |= write_request(f, b, 0, 10, false);	      /* RDMA: refused */
	ret |= write_request(f, b, 10, 101, false);	      /* stream */
	ret |= write_request(f, b, 250, 51, false);	      /* stream past the end */
	return ret;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	return fuzz_write_seed(dir, name, "", 0, text, strlen(text));
}

int fuzz_make_corpus(const char *dir)
{
	struct ferry__fb_builder b = {0};
	char path[4096];
	FILE *f;
	int bad = 0;

	snprintf(path, sizeof(path), "%s/seed-requests", dir);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	bad |= seed_requests(f, &b) != 0;
	bad |= fclose(f) != 0;
	/* one request alone: a whole message as an engine hands it to ferry__objmgr_unwrap */
	snprintf(path, sizeof(path), "%s/seed-one-request", dir);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	bad |= write_request(f, &b, 100, 50, true) != 0;
	bad |= fclose(f) != 0;
	ferry__fb_builder_fini(&b);
	bad |= write_text(dir, "seed-address-full",
			  "Aip=10.0.0.1;tcp=7001;rdma=7002;shm=/run/ferry/plasma.sock;"
			  "host=0b6e5c1a-3d2f-4a8e-9c71-5f2d8e4b6a10");
	bad |= write_text(dir, "seed-address-v6", "Ahost=abc-def;tcp=1;ip=::1");
	bad |= write_text(dir, "seed-address-run", "Aip=10.0.0.1;tcp=7;host=ab;run=9f0c3e");
	bad |= write_text(dir, "seed-address-bad", "Aip=10.0.0.1;tcp=0;tcp=7;host=x;");
	return bad;
}

#endif
