/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framing of control messages on stream sockets: a fixed 8-byte header then the FlatBuffer
 * payload. Header, little-endian: byte 0 magic 0xFE, byte 1 frame version 1, bytes 2-3 the
 * MessageType (schema/messages.fbs), bytes 4-7 the payload length.
 *
 * DESIGN: the reader side is an incremental parser that takes bytes in whatever pieces the
 * socket delivers and hands out complete frames; it rejects a bad header (magic, version,
 * unknown type, length over the limit) as soon as its 8 bytes are in, so an oversize frame is
 * refused before its payload is read. After a bad header the parser stays failed: a stream
 * cannot be resynchronised, the connection must be closed. The writer side builds a frame in
 * place in a FlatBuffers builder's headroom (no copy) and tracks partial writes by offset.
 *
 * Thread model: a parser or an outgoing frame belongs to one thread (the connection's loop).
 */
#ifndef FERRY_COMMON_FRAME_H
#define FERRY_COMMON_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fb.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_FRAME_HEADER_SIZE 8
#define FERRY_FRAME_MAGIC 0xFE
#define FERRY_FRAME_VERSION 1
/* Default largest payload a connection accepts (a connection may choose its own). */
#define FERRY_FRAME_MAX_LENGTH_DEFAULT (16u << 20)

struct ferry__frame_header {
	uint16_t type;	 /* MessageType */
	uint32_t length; /* payload bytes after the header */
};

void ferry__frame_header_encode(uint8_t out[FERRY_FRAME_HEADER_SIZE], uint16_t type,
				uint32_t length);
/* -EPROTO (logged) on bad magic/version, unknown type, or length > max_length */
int ferry__frame_header_decode(const uint8_t *in, uint32_t max_length,
			       struct ferry__frame_header *out);

/* ---- reading: the incremental parser ---- */

struct ferry__frame {
	uint16_t type;		/* MessageType */
	uint32_t length;	/* payload bytes */
	const uint8_t *payload; /* inside the parser's buffer; see ferry__frame_parser_next() */
};

struct ferry__frame_parser {
	uint8_t *buf;	     /* ferry__malloc'd receive buffer, NULL until needed */
	size_t cap;	     /* its size */
	size_t start;	     /* first byte not yet handed out */
	size_t end;	     /* one past the last byte received */
	uint32_t max_length; /* largest payload accepted */
	int error;	     /* 0, or -EPROTO once a bad header was seen (sticky) */
};

/* Ready to use; allocates nothing. @max_length 0 means FERRY_FRAME_MAX_LENGTH_DEFAULT. */
void ferry__frame_parser_init(struct ferry__frame_parser *p, uint32_t max_length);
void ferry__frame_parser_fini(struct ferry__frame_parser *p);

/*
 * ferry__frame_parser_space() - where the next read should go: *@space and *@size (> 0) in
 * the parser's buffer, large enough for the rest of the current frame when its header is in.
 * Call ferry__frame_parser_commit() with the bytes actually read. Invalidates frames handed
 * out before. Returns 0, -ENOMEM, or the sticky -EPROTO.
 */
int ferry__frame_parser_space(struct ferry__frame_parser *p, uint8_t **space, size_t *size);
void ferry__frame_parser_commit(struct ferry__frame_parser *p, size_t n);

/* Copy @n bytes in (space + commit in a loop). Returns 0, -ENOMEM or -EPROTO. */
int ferry__frame_parser_feed(struct ferry__frame_parser *p, const void *data, size_t n);

/*
 * ferry__frame_parser_next() - the next complete frame, if any.
 * Returns 1 and fills @out (the payload stays valid until the next call to _space, _feed or
 * _fini; _next itself does not move data), 0 when more bytes are needed, -EPROTO on a bad
 * header (logged; sticky). The payload is not verified: see ferry__wire_verify().
 */
int ferry__frame_parser_next(struct ferry__frame_parser *p, struct ferry__frame *out);

/* Bytes received but not handed out as frames (a partial frame at close means truncation). */
static inline size_t ferry__frame_parser_pending(const struct ferry__frame_parser *p)
{
	return p->end - p->start;
}

/* ---- writing ---- */

/*
 * ferry__frame_finish() - turn the payload just built in @b into a frame of @type by writing
 * the header into the builder's headroom: *@frame, *@size = header + payload, valid until
 * the builder's next build or fini. Returns 0, or -EINVAL when @b holds no finished payload.
 */
int ferry__frame_finish(struct ferry__fb_builder *b, uint16_t type, const uint8_t **frame,
			size_t *size);

/*
 * ferry__frame_pack() - a frame of @type around a copy of @payload, in one new buffer
 * (*@frame, free with ferry__free; *@size bytes). Returns 0, -ENOMEM, or -E2BIG when @len
 * does not fit the header's length field.
 */
int ferry__frame_pack(uint16_t type, const void *payload, size_t len, uint8_t **frame,
		      size_t *size);

/* An outgoing frame being written with partial writes: the writer owns neither buffer. */
struct ferry__frame_out {
	const uint8_t *data; /* the whole frame */
	size_t size;	     /* its size */
	size_t done;	     /* bytes already written */
};

/* What remains to write: returns the byte count and sets *@next to the first of them. */
static inline size_t ferry__frame_out_remaining(const struct ferry__frame_out *o,
						const uint8_t **next)
{
	*next = o->data + o->done;
	return o->size - o->done;
}

/* Account for @n bytes written; true when the frame is complete. */
static inline bool ferry__frame_out_advance(struct ferry__frame_out *o, size_t n)
{
	o->done += n < o->size - o->done ? n : o->size - o->done;
	return o->done == o->size;
}

#ifdef __cplusplus
}
#endif
#endif
