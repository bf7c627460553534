/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS's small binary codec: a growable byte buffer, a little-endian writer and a
 * bounds-checked reader with sticky errors, and CRC32C. Used by the WAL framing, the buffers
 * of the GCS records (gcs/ops_fb.c) and snapshots. Encoding: integers little-endian, doubles as
 * their IEEE-754 bits, byte strings as u32 length + bytes, text as u32 length + bytes + NUL.
 *
 * Thread model: no shared state (the CRC table is built once at load time).
 */
#ifndef FERRY_GCS_CODEC_H
#define FERRY_GCS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A borrowed run of bytes. */
struct ferry__gcs_slice {
	const void *data; /* may be NULL when size is 0 */
	size_t size;	  /* bytes */
};

/* A growable buffer. All zeros is an empty buffer. */
struct ferry__gcs_buf {
	uint8_t *data;	 /* ferry__malloc'd, or NULL */
	size_t size;	 /* bytes in use */
	size_t capacity; /* bytes allocated */
};

void ferry__gcs_buf_fini(struct ferry__gcs_buf *b);
/* ferry__gcs_buf_reserve() - room for @extra more bytes. 0 or -ENOMEM (buffer unchanged). */
int ferry__gcs_buf_reserve(struct ferry__gcs_buf *b, size_t extra);
/* ferry__gcs_buf_grow() - append @n bytes, returning where they go, or NULL on -ENOMEM. */
void *ferry__gcs_buf_grow(struct ferry__gcs_buf *b, size_t n);

/* Writer: appends to @buf; the first failure sticks in @err (-ENOMEM) and later puts no-op. */
struct ferry__gcs_writer {
	struct ferry__gcs_buf *buf; /* destination */
	int err;		    /* 0 or the first error */
};

void ferry__gcs_put_raw(struct ferry__gcs_writer *w, const void *data, size_t size);
void ferry__gcs_put_u8(struct ferry__gcs_writer *w, uint8_t v);
void ferry__gcs_put_u32(struct ferry__gcs_writer *w, uint32_t v);
void ferry__gcs_put_u64(struct ferry__gcs_writer *w, uint64_t v);
void ferry__gcs_put_f64(struct ferry__gcs_writer *w, double v);
void ferry__gcs_put_bytes(struct ferry__gcs_writer *w, const void *data, size_t size);
/* @s may be NULL: written as the empty string, read back as NULL (see get_str). */
void ferry__gcs_put_str(struct ferry__gcs_writer *w, const char *s);

/* Reader over borrowed bytes; running past the end or a malformed string sets @err = -EPROTO
 * and makes every later get return zeros. A caller may set @err itself (e.g. -ENOMEM); the
 * first error sticks. */
struct ferry__gcs_reader {
	const uint8_t *p; /* next byte */
	size_t left;	  /* bytes left */
	int err;	  /* 0 or -EPROTO */
};

void ferry__gcs_get_raw(struct ferry__gcs_reader *r, void *out, size_t size);
uint8_t ferry__gcs_get_u8(struct ferry__gcs_reader *r);
uint32_t ferry__gcs_get_u32(struct ferry__gcs_reader *r);
uint64_t ferry__gcs_get_u64(struct ferry__gcs_reader *r);
double ferry__gcs_get_f64(struct ferry__gcs_reader *r);
/* A byte string of at most @max bytes, borrowed from the reader's input. */
struct ferry__gcs_slice ferry__gcs_get_bytes(struct ferry__gcs_reader *r, size_t max);
/* Text of at most @max bytes, borrowed (the NUL is in the input). The empty string reads as
 * NULL, so optional text round-trips. Embedded NULs are malformed. */
const char *ferry__gcs_get_str(struct ferry__gcs_reader *r, size_t max);

/* Little-endian loads and stores for fixed headers. */
static inline void ferry__gcs_store_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ferry__gcs_store_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t ferry__gcs_load_u32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t ferry__gcs_load_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ferry__crc32c() - CRC32C (Castagnoli) of @size bytes, continuing from @crc (0 to start). */
uint32_t ferry__crc32c(uint32_t crc, const void *data, size_t size);

#endif
