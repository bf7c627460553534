/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the same-host ring reader (runtime/ring.c), as a worker or owner sees
 * the ring its peer writes: the peer controls the head, every slot's header and bytes, and the
 * consumer's counters. Input: the reader's position (4 bytes LE), the head (4 bytes LE), the
 * tail the writer finds (4 bytes LE), then the bytes of the ring's slots (the rest zero). The
 * reader takes messages as runtime/ring_conn.c does (copy out, then ferry__wire_verify) until
 * the ring is empty or garbage; it must never read past its slots (the ring is the end of an
 * exactly sized buffer, so ASan sees it), take more than a ring's worth, or return anything but
 * 1, 0 or -EPROTO; a writer facing any tail must return 0, -EAGAIN or -EPROTO.
 *
 * Built with FUZZ_RING_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_ring_replay DIR|FILE...        run each input
 *   fuzz_ring_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD ring-corpus)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fb.h"
#include "common/wire.h"
#include "runtime/ring.h"

#include "fuzz_replay.h"

#define SLOT 256u
#define NSLOTS 8u

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t bytes = (size_t)ferry__ring_bytes(SLOT, NSLOTS);
	uint8_t *base, buf[SLOT];
	struct ferry__ring_dir rx, tx;
	uint32_t taken = 0;
	uint16_t type;
	size_t len;
	int r;

	if (size < 12)
		return 0;
	base = aligned_alloc(64, bytes);
	if (!base)
		return 0;
	memset(base, 0, bytes);
	/* Direction 1 is the buffer's last: a read past its slots leaves the allocation. */
	ferry__ring_dir_init(&rx, base, 1, SLOT, NSLOTS);
	rx.pos = le32(data);
	atomic_store(&rx.ctl->head, le32(data + 4));
	memcpy(rx.slots, data + 12, size - 12 < (size_t)SLOT * NSLOTS ? size - 12 : SLOT * NSLOTS);
	while ((r = ferry__ring_get(&rx, buf, &type, &len)) == 1) {
		if (len > SLOT - FERRY__RING_SLOT_HEADER || ++taken > NSLOTS)
			abort();
		(void)ferry__wire_verify(type, buf, len);
	}
	if (r != 0 && r != -EPROTO)
		abort();
	/* The writer's side of the same ring: the tail is the peer's. */
	ferry__ring_dir_init(&tx, base, 1, SLOT, NSLOTS);
	tx.pos = le32(data);
	atomic_store(&tx.ctl->tail, le32(data + 8));
	r = ferry__ring_put(&tx, FERRY__WIRE_MSG_PUSH_TASK, buf, 16);
	if (r != 0 && r != -EAGAIN && r != -EPROTO)
		abort();
	free(base);
	return 0;
}

#ifdef FUZZ_RING_REPLAY

/* A seed: position @pos, head @head, tail @tail, then @n messages of @type built in @b each
 * in its slot (a length of @len_override when not 0). */
static int seed(const char *dir, const char *name, uint32_t pos, uint32_t head, uint32_t tail,
		const struct ferry__fb_builder *b, uint16_t type, unsigned n, uint32_t len_override)
{
	uint8_t in[12 + SLOT * NSLOTS] = {0};
	uint32_t words[3] = {pos, head, tail};
	size_t len = b ? ferry__fb_builder_size(b) : 0;

	for (int w = 0; w < 3; w++)
		for (int i = 0; i < 4; i++)
			in[w * 4 + i] = (uint8_t)(words[w] >> (8 * i));
	for (unsigned k = 0; k < n && len <= SLOT - FERRY__RING_SLOT_HEADER; k++) {
		uint8_t *slot = in + 12 + ((pos + k) % NSLOTS) * SLOT;
		uint32_t l = len_override ? len_override : (uint32_t)len;

		memcpy(slot, &l, 4);
		memcpy(slot + 4, &type, 2);
		memcpy(slot + FERRY__RING_SLOT_HEADER, ferry__fb_builder_data(b), len);
	}
	return fuzz_write_seed(dir, name, NULL, 0, in, sizeof(in));
}

int fuzz_make_corpus(const char *dir)
{
	struct ferry__fb_builder b;
	struct ferry__wire_push_task_reply m = {.status = 0, .message = "ok"};
	int bad = 0;

	memset(m.task_id.bytes, 0x11, sizeof(m.task_id.bytes));
	ferry__fb_builder_init(&b);
	if (ferry__wire_push_task_reply_build(&b, &m) < 0)
		return 1;
	bad |= seed(dir, "seed-three-replies", 0, 3, 0, &b, FERRY__WIRE_MSG_PUSH_TASK_REPLY, 3, 0);
	bad |= seed(dir, "seed-wrapped", UINT32_MAX - 1, 2, UINT32_MAX - 1, &b,
		    FERRY__WIRE_MSG_PUSH_TASK_REPLY, 4, 0);
	bad |= seed(dir, "seed-full", 5, 5 + NSLOTS, 5, &b, FERRY__WIRE_MSG_PUSH_TASK_REPLY, NSLOTS,
		    0);
	bad |= seed(dir, "seed-head-ahead", 0, NSLOTS + 1, 0, &b, FERRY__WIRE_MSG_PUSH_TASK_REPLY,
		    1, 0);
	bad |= seed(dir, "seed-head-behind", 10, 9, 10, &b, FERRY__WIRE_MSG_PUSH_TASK_REPLY, 1, 0);
	bad |= seed(dir, "seed-length-past-slot", 0, 1, 0, &b, FERRY__WIRE_MSG_PUSH_TASK_REPLY, 1,
		    SLOT);
	bad |= seed(dir, "seed-unknown-type", 0, 1, 0, &b, 0xffff, 1, 0);
	bad |= seed(dir, "seed-tail-ahead", 0, 0, 7, NULL, 0, 0, 0);
	/* A compiled graph's values take the rings too (runtime/graph.c, graph_worker.c). */
	{
		static const uint8_t value[8] = {1, 2, 3, 4, 5, 6, 7, 8};
		struct ferry__wire_graph_data d = {
			.seq = 3, .node = 1, .data = value, .data_count = sizeof(value)};

		memset(d.graph_id.bytes, 0x22, sizeof(d.graph_id.bytes));
		if (ferry__wire_graph_data_build(&b, &d) < 0)
			bad = 1;
		else
			bad |= seed(dir, "seed-graph-data", 0, 2, 0, &b, FERRY__WIRE_MSG_GRAPH_DATA,
				    2, 0);
	}
	ferry__fb_builder_fini(&b);
	return bad;
}

#endif
