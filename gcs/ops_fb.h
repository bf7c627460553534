/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the parts of the GcsRecord codec: gcs/ops_fb.c (the entry points, the tables, KV,
 * logs, task events and errors), gcs/ops_fb_obj.c (placement groups, the object directory,
 * dedup and dropped-count records) and gcs/ops_fb_beat.c (heartbeats and load reports).
 * Callers use ferry__gcs_op_encode()/_decode() (gcs/ops.h).
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_GCS_OPS_FB_H
#define FERRY_GCS_OPS_FB_H

#include <stdbool.h>

#include "gcs/ops.h"
#include "schema/ferry_schema.h"

#define TO_WIRE_ID(dst, src) memcpy((dst).bytes, (src).bytes, sizeof((dst).bytes))
#define FROM_WIRE_ID(dst, v) memcpy((dst).bytes, (v).bytes, sizeof((dst).bytes))

/* Text as a FlatBuffers string: NULL and "" are both absent (they read back as NULL). */
static inline const char *ferry__gcs_fb_text(const char *s)
{
	return s && *s ? s : NULL;
}

/* Build @rec into @w after the record prefix; the first error sticks in @w. */
void ferry__gcs_record_build(const struct ferry__wire_gcs_record *rec, struct ferry__gcs_writer *w);
/* An array of @count zeroed elements owned by @op (freed by ferry__gcs_op_release()). */
void *ferry__gcs_op_array(struct ferry__gcs_op *op, size_t count, size_t elem);
/* A string field read back as text: absent and "" are NULL; longer than @max or with a NUL
 * inside: -EPROTO. */
int ferry__gcs_fb_text_get(const char *s, uint32_t len, size_t max, const char **out);
/* A resource set; its custom amounts owned by @op. 0, -EPROTO, -ENOMEM. */
int ferry__gcs_fb_get_resources(struct ferry__wire_gcs_resources_view v, struct ferry__gcs_op *op,
				struct ferry__gcs_resources *r);

/* gcs/ops_fb_obj.c: whether it codes @type; encode into @w; decode from @v (0, -EPROTO,
 * -ENOMEM; the caller logs and releases). */
bool ferry__gcs_op_is_obj_fb(enum ferry__gcs_op_type type);
void ferry__gcs_op_encode_obj_fb(const struct ferry__gcs_op *op, struct ferry__wire_gcs_record *rec,
				 struct ferry__gcs_writer *w);
int ferry__gcs_op_decode_obj_fb(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op);

/* gcs/ops_fb_beat.c: NODE_HEARTBEAT and NODE_LOAD, encoded into @w or decoded from @v (0,
 * -EPROTO, -ENOMEM; the caller logs and releases). */
void ferry__gcs_op_encode_beat_fb(const struct ferry__gcs_op *op,
				  struct ferry__wire_gcs_record *rec, struct ferry__gcs_writer *w);
int ferry__gcs_op_decode_beat_fb(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op);

#endif
