/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the owner socket's decoder (runtime/owner_srv.c): ObjectGet and
 * BorrowUpdate payloads as any local process may send them to an owner, untrusted. The first
 * byte picks the message type (its value modulo 2), the rest is the payload. The decoder must
 * return 0, -EPROTO or -EINVAL, and what it accepts must name an object and a delta of 1 or -1.
 *
 * Built with FUZZ_OWNER_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_owner_replay DIR|FILE...        run each input
 *   fuzz_owner_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD owner-corpus)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fb.h"
#include "common/wire.h"
#include "runtime/owner.h"

#include "fuzz_replay.h"

static const uint16_t types[2] = {
	FERRY__WIRE_MSG_OBJECT_GET,
	FERRY__WIRE_MSG_BORROW_UPDATE,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ferry__rt_owner_msg m;
	uint8_t *copy, kind;
	size_t len;
	int r;

	copy = fuzz_typed_payload(data, size, &kind, &len);
	if (!copy)
		return 0;
	r = ferry__rt_owner_decode(types[kind % 2], copy, len, &m);
	if (r != 0 && r != -EPROTO && r != -EINVAL)
		abort();
	if (r == 0 && (ferry_id_is_nil(m.id.bytes, sizeof(m.id.bytes)) ||
		       (m.type == FERRY__WIRE_MSG_BORROW_UPDATE && m.delta != 1 && m.delta != -1)))
		abort();
	free(copy);
	return 0;
}

#ifdef FUZZ_OWNER_REPLAY

static int seed(const char *dir, const char *name, uint8_t kind, struct ferry__fb_builder *b,
		int built)
{
	if (built < 0)
		return 1;
	return fuzz_write_seed(dir, name, &kind, 1, ferry__fb_builder_data(b),
			       ferry__fb_builder_size(b));
}

int fuzz_make_corpus(const char *dir)
{
	struct ferry__fb_builder b = {0};
	struct ferry__wire_object_get g = {.request_id = 1};
	struct ferry__wire_borrow_update u = {.request_id = 2, .delta = 1};
	int bad = 0;

	memset(g.object_id.bytes, 0x33, sizeof(g.object_id.bytes));
	memset(u.object_id.bytes, 0x44, sizeof(u.object_id.bytes));
	bad |= seed(dir, "seed-object-get", 0, &b, ferry__wire_object_get_build(&b, &g));
	bad |= seed(dir, "seed-borrow-add", 1, &b, ferry__wire_borrow_update_build(&b, &u));
	u.delta = -1;
	bad |= seed(dir, "seed-borrow-drop", 1, &b, ferry__wire_borrow_update_build(&b, &u));
	u.delta = 7;
	bad |= seed(dir, "seed-borrow-bad-delta", 1, &b, ferry__wire_borrow_update_build(&b, &u));
	ferry__fb_builder_fini(&b);
	return bad;
}

#endif
