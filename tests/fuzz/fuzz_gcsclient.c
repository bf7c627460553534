/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the GCS client's decoder of batch lookup replies: the input is one byte,
 * the number of IDs asked (0 counts as 1), then the reply's value as a server would send it
 * (a GcsValueList: per ID an object record, or not found). It is decoded, packed and freed as the
 * client does; the whole input also goes through the object record decoder alone, and through
 * the heartbeat reply's GcsBeatInfo decoder (the value after the first byte).
 *
 * Built with FUZZ_GCSCLIENT_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_gcsclient_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_gcsclient_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD gcsclient-corpus)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "gcs/client.h"
#include "gcs/codec.h"
#include "gcs/ops.h"
#include "gcs/values.h"

#include "fuzz_replay.h"

static unsigned decoded; /* inputs whose batch decoded whole */

/* As the client's heartbeat reply decoder reads it (gcs/client_api.c). */
static void beat_info(const uint8_t *data, size_t size)
{
	struct ferry__wire_gcs_beat_info_view v;
	volatile uint64_t sink;

	if (ferry__wire_gcs_beat_info_root(data, size, &v) == 0)
		sink = ferry__wire_gcs_beat_info_alive_nodes(v) +
		       ferry__wire_gcs_beat_info_membership_version(v);
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct ferry_gcs_event ev = {.channel = FERRY_GCS_CH_OBJECT_LOCATIONS};
	struct ferry_gcs_object_info info;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	if (!size)
		return 0;
	if (ferry__gcs_batch_reply_check(data + 1, size - 1, data[0] ? data[0] : 1) == 0)
		decoded++;
	beat_info(data + 1, size - 1);
	ev.data = data;
	ev.size = size;
	if (ferry_gcs_event_object(&ev, &info) == 0) /* the record decoder, as events use it */
		ferry_gcs_free(info.locations);
	return 0;
}

#ifdef FUZZ_GCSCLIENT_REPLAY

/* A corpus in which no batch decodes tests only the error paths. */
int fuzz_replay_check(void)
{
	if (decoded)
		return 0;
	fprintf(stderr, "no input decoded as a whole batch reply\n");
	return 1;
}

/* A RESTORE_OBJ record with @n copies (places known) into @rec. */
static int put_object(struct ferry__gcs_buf *rec, uint32_t n)
{
	static const struct ferry_node_id nodes[2] = {{{1, 2, 3}}, {{4, 5, 6}}};
	static const struct ferry_gcs_object_place places[2] = {{4096, 17, 0}, {8192, 18, 0}};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_RESTORE_OBJ};
	struct ferry__gcs_writer rw = {rec, 0};

	op.obj.id.bytes[0] = 9;
	op.obj.owner_node = nodes[0];
	op.obj.size_bytes = 100;
	op.obj.state = FERRY_GCS_OBJECT_AVAILABLE;
	op.obj.nlocations = n;
	op.obj.locations = nodes;
	op.obj.places = places;
	ferry__gcs_op_encode(&op, &rw);
	return rw.err;
}

int fuzz_make_corpus(const char *dir)
{
	struct ferry__gcs_buf value = {0}, two = {0}, none = {0};
	struct ferry__gcs_value list[3] = {{{0}, false}, {{0}, false}, {{0}, false}};
	uint8_t count = 3;
	int bad = put_object(&two, 2) || put_object(&none, 0);

	list[0] = (struct ferry__gcs_value){{two.data, two.size}, true};
	list[2] = (struct ferry__gcs_value){{none.data, none.size}, true}; /* [1]: unknown */
	bad = bad || ferry__gcs_values_encode(list, 3, &value) ||
	      fuzz_write_seed(dir, "seed-batch", &count, 1, value.data, value.size);
	ferry__gcs_buf_fini(&value);
	ferry__gcs_buf_fini(&two);
	ferry__gcs_buf_fini(&none);
	if (!bad) {
		struct ferry__wire_gcs_beat_info info = {10000, 42};
		struct ferry__fb_builder b = {0};

		bad = ferry__wire_gcs_beat_info_build(&b, &info) < 0 ||
		      fuzz_write_seed(dir, "seed-beat", &count, 1, ferry__fb_builder_data(&b),
				      ferry__fb_builder_size(&b));
		ferry__fb_builder_fini(&b);
	}
	return bad;
}

#endif
