/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lists of byte strings as schema/gcs.fbs GcsValueList FlatBuffers: the value of the GCS's list
 * replies (KV keys by prefix, KV multi-get, table listings, batch object lookups) and the key
 * list of a KV multi-get. An empty buffer is an empty list.
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_GCS_VALUES_H
#define FERRY_GCS_VALUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gcs/codec.h"
#include "schema/ferry_schema.h"

/* One entry: found false for a key or object that is not there (data then empty). */
struct ferry__gcs_value {
	struct ferry__gcs_slice data;
	bool found;
};

/* A verified list: entries read with ferry__gcs_values_at(), borrowing from the buffer. */
struct ferry__gcs_values {
	struct ferry__wire_gcs_value_list_view view;
	uint32_t count;
};

/* ferry__gcs_values_encode() - replace @out's contents with the list of @n entries of @v.
 * 0 or -ENOMEM. */
int ferry__gcs_values_encode(const struct ferry__gcs_value *v, size_t n,
			     struct ferry__gcs_buf *out);

/* ferry__gcs_values_open() - verify @size bytes at @data as a list of at most @max entries into
 * @vl. 0, or -EPROTO (not a GcsValueList, or longer: logged with @what). */
int ferry__gcs_values_open(const void *data, size_t size, uint32_t max, const char *what,
			   struct ferry__gcs_values *vl);
struct ferry__gcs_value ferry__gcs_values_at(const struct ferry__gcs_values *vl, uint32_t i);

#endif
