/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the wire path a server runs on untrusted bytes: the frame parser (fed
 * in pieces whose sizes derive from the input), then for each frame the verifier for its own
 * type and for every other type (a peer may lie about the type), and, whenever a verifier
 * accepts, a read of every field through the generated accessors and the handshake check.
 * Input: a byte stream as a socket would deliver it (corpus files are frames).
 */
#include <stdbool.h>
#include <stdio.h>

#include "common/frame.h"
#include "common/wire.h"
#include "fuzz_wire.h"
#include "schema/ferry_schema_testgen.h"

/* Large enough for every corpus frame, small enough that the parser's limit is reachable. */
#define FUZZ_MAX_LENGTH (1u << 20)

uint8_t fuzz_wire_verified[65536];

static void read_as(uint16_t type, const uint8_t *payload, size_t len)
{
	const struct ferry__wire_test_table *t = ferry__wire_test_table_for_type(type);

	if (!t || ferry__wire_verify(type, payload, len))
		return;
	(void)t->walk(payload);
	if (type == FERRY__WIRE_MSG_HANDSHAKE)
		(void)ferry__wire_check_handshake(payload, len, "token", 5,
						  FERRY_WIRE_PROTOCOL_VERSION);
}

static void handle(const struct ferry__frame *f)
{
	if (!ferry__wire_verify(f->type, f->payload, f->length))
		fuzz_wire_verified[f->type] = 1;
	for (size_t i = 0; i < ferry__wire_message_count; i++)
		read_as(ferry__wire_messages[i].type, f->payload, f->length);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct ferry__frame_parser p;
	struct ferry__frame f;
	uint32_t rng = (uint32_t)size * 2654435761u;
	size_t at = 0;
	int ret = 0;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	ferry__frame_parser_init(&p, FUZZ_MAX_LENGTH);
	while (at < size && ret >= 0) {
		size_t n;

		rng = rng * 1103515245u + 12345u;
		n = 1 + (rng >> 16) % 97;
		if (n > size - at)
			n = size - at;
		if (ferry__frame_parser_feed(&p, data + at, n))
			break;
		at += n;
		while ((ret = ferry__frame_parser_next(&p, &f)) == 1)
			handle(&f);
	}
	ferry__frame_parser_fini(&p);
	return 0;
}

/* The replay's check: the corpus must hold a valid frame of every message type. */
int fuzz_replay_check(void)
{
	int bad = 0;

	for (size_t i = 0; i < ferry__wire_message_count; i++) {
		if (!fuzz_wire_verified[ferry__wire_messages[i].type]) {
			fprintf(stderr, "no valid %s frame in the corpus\n",
				ferry__wire_messages[i].name);
			bad = 1;
		}
	}
	return bad;
}
