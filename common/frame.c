/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frame header codec, the incremental frame parser and frame building (see frame.h).
 * The parser keeps unconsumed bytes at the front of one buffer: it compacts (memmove) only
 * when asked for space, grows to exactly what the current frame needs, and gives memory back
 * after an unusually large frame.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/wire.h"

/* Receive buffer: at least this much per read; kept across frames up to KEEP bytes. */
#define PARSER_MIN_READ 4096
#define PARSER_KEEP (256u << 10)

_Static_assert(FERRY_FRAME_HEADER_SIZE == FERRY_FB_HEADROOM,
	       "frames are finished in the builder's headroom");

void ferry__frame_header_encode(uint8_t out[FERRY_FRAME_HEADER_SIZE], uint16_t type,
				uint32_t length)
{
	out[0] = FERRY_FRAME_MAGIC;
	out[1] = FERRY_FRAME_VERSION;
	ferry__fb_store_u16(out + 2, type);
	ferry__fb_store_u32(out + 4, length);
}

int ferry__frame_header_decode(const uint8_t *in, uint32_t max_length,
			       struct ferry__frame_header *out)
{
	uint16_t type = ferry__fb_load_u16(in + 2);
	uint32_t length = ferry__fb_load_u32(in + 4);

	if (in[0] != FERRY_FRAME_MAGIC || in[1] != FERRY_FRAME_VERSION) {
		FLOG_WARN("wire", "bad frame header: magic 0x%02x version %u", in[0], in[1]);
		return -EPROTO;
	}
	if (!ferry__wire_message_info(type)) {
		FLOG_WARN("wire", "frame of unknown message type %u", type);
		return -EPROTO;
	}
	if (length > max_length) {
		FLOG_WARN("wire", "%s frame of %u bytes exceeds the limit of %u",
			  ferry__wire_message_name(type), length, max_length);
		return -EPROTO;
	}
	out->type = type;
	out->length = length;
	return 0;
}

void ferry__frame_parser_init(struct ferry__frame_parser *p, uint32_t max_length)
{
	memset(p, 0, sizeof(*p));
	p->max_length = max_length ? max_length : FERRY_FRAME_MAX_LENGTH_DEFAULT;
}

void ferry__frame_parser_fini(struct ferry__frame_parser *p)
{
	ferry__free(p->buf);
	p->buf = NULL;
	p->cap = p->start = p->end = 0;
}

/* Bytes the current frame still needs in the buffer (header, or header + payload). */
static size_t frame_bytes_wanted(const struct ferry__frame_parser *p)
{
	size_t have = p->end - p->start;

	if (have < FERRY_FRAME_HEADER_SIZE)
		return FERRY_FRAME_HEADER_SIZE;
	/* Only the length is read here; judging the header is _next's job (the caller caps a
	 * length over the limit, which _next then refuses). */
	return FERRY_FRAME_HEADER_SIZE + (size_t)ferry__fb_load_u32(p->buf + p->start + 4);
}

int ferry__frame_parser_space(struct ferry__frame_parser *p, uint8_t **space, size_t *size)
{
	size_t have, want, cap;
	uint8_t *buf;

	if (p->error)
		return p->error;
	have = p->end - p->start;
	if (have && p->start) {
		memmove(p->buf, p->buf + p->start, have);
	} else if (!have && p->cap > PARSER_KEEP) {
		ferry__free(p->buf);
		p->buf = NULL;
		p->cap = 0;
	}
	p->start = 0;
	p->end = have;
	want = frame_bytes_wanted(p);
	if (want > FERRY_FRAME_HEADER_SIZE + (size_t)p->max_length)
		want = FERRY_FRAME_HEADER_SIZE; /* bad length: _next will refuse it */
	cap = want > PARSER_MIN_READ ? want : PARSER_MIN_READ;
	if (p->cap < cap || p->cap == have) {
		if (cap <= have)
			cap = have + PARSER_MIN_READ;
		buf = ferry__realloc(p->buf, cap);
		if (!buf)
			return -ENOMEM;
		p->buf = buf;
		p->cap = cap;
	}
	*space = p->buf + p->end;
	*size = p->cap - p->end;
	return 0;
}

void ferry__frame_parser_commit(struct ferry__frame_parser *p, size_t n)
{
	assert(n <= p->cap - p->end);
	p->end += n;
}

int ferry__frame_parser_feed(struct ferry__frame_parser *p, const void *data, size_t n)
{
	const uint8_t *in = data;
	uint8_t *space;
	size_t size;
	int ret;

	while (n) {
		ret = ferry__frame_parser_space(p, &space, &size);
		if (ret)
			return ret;
		if (size > n)
			size = n;
		memcpy(space, in, size);
		ferry__frame_parser_commit(p, size);
		in += size;
		n -= size;
	}
	return p->error;
}

int ferry__frame_parser_next(struct ferry__frame_parser *p, struct ferry__frame *out)
{
	struct ferry__frame_header h;
	size_t have = p->end - p->start;

	if (p->error)
		return p->error;
	if (have < FERRY_FRAME_HEADER_SIZE)
		return 0;
	if (ferry__frame_header_decode(p->buf + p->start, p->max_length, &h)) {
		p->error = -EPROTO;
		return p->error;
	}
	if (have - FERRY_FRAME_HEADER_SIZE < h.length)
		return 0;
	out->type = h.type;
	out->length = h.length;
	out->payload = p->buf + p->start + FERRY_FRAME_HEADER_SIZE;
	p->start += FERRY_FRAME_HEADER_SIZE + (size_t)h.length;
	return 1;
}

int ferry__frame_finish(struct ferry__fb_builder *b, uint16_t type, const uint8_t **frame,
			size_t *size)
{
	uint8_t *head = ferry__fb_builder_headroom(b);
	size_t len = ferry__fb_builder_size(b);

	if (!head) {
		FLOG_WARN("wire", "frame_finish: the builder holds no finished message");
		return -EINVAL;
	}
	ferry__frame_header_encode(head, type, (uint32_t)len);
	*frame = head;
	*size = FERRY_FRAME_HEADER_SIZE + len;
	return 0;
}

int ferry__frame_pack(uint16_t type, const void *payload, size_t len, uint8_t **frame, size_t *size)
{
	uint8_t *buf;

	if (len > UINT32_MAX - FERRY_FRAME_HEADER_SIZE) {
		FLOG_WARN("wire", "frame_pack: %zu bytes do not fit a frame", len);
		return -E2BIG;
	}
	buf = ferry__malloc(FERRY_FRAME_HEADER_SIZE + len);
	if (!buf)
		return -ENOMEM;
	ferry__frame_header_encode(buf, type, (uint32_t)len);
	if (len)
		memcpy(buf + FERRY_FRAME_HEADER_SIZE, payload, len);
	*frame = buf;
	*size = FERRY_FRAME_HEADER_SIZE + len;
	return 0;
}
