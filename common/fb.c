/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FlatBuffers runtime: the front-to-back builder and the verifier that generated code calls
 * (format and design notes in fb.h). Positions are 64-bit while checking, so no offset or
 * length can wrap around and point back into the buffer.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/log.h"

/* ---- builder ---- */

#define BUILDER_MIN_CAP 256

void ferry__fb_builder_init(struct ferry__fb_builder *b)
{
	memset(b, 0, sizeof(*b));
}

void ferry__fb_builder_fini(struct ferry__fb_builder *b)
{
	ferry__free(b->buf);
	ferry__fb_builder_init(b);
}

const uint8_t *ferry__fb_builder_data(const struct ferry__fb_builder *b)
{
	return b->done ? b->buf + FERRY_FB_HEADROOM : NULL;
}

size_t ferry__fb_builder_size(const struct ferry__fb_builder *b)
{
	return b->done ? b->size : 0;
}

uint8_t *ferry__fb_builder_headroom(struct ferry__fb_builder *b)
{
	return b->done ? b->buf : NULL;
}

/* Make room for @payload_size payload bytes; doubling keeps appends amortised O(1). */
static int reserve(struct ferry__fb_builder *b, uint64_t payload_size)
{
	uint64_t need = payload_size + FERRY_FB_HEADROOM;
	size_t cap = b->cap ? b->cap : BUILDER_MIN_CAP;
	uint8_t *buf;

	if (payload_size > FERRY_FB_MAX_SIZE) {
		FLOG_DEBUG("wire", "builder: message exceeds %u bytes", FERRY_FB_MAX_SIZE);
		return -E2BIG;
	}
	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	buf = ferry__realloc(b->buf, cap);
	if (!buf)
		return -ENOMEM;
	b->buf = buf;
	b->cap = cap;
	return 0;
}

/* Append @pad zero bytes then @size zero bytes; *@pos is where the @size bytes start. */
static int grow(struct ferry__fb_builder *b, uint64_t pad, uint64_t size, uint32_t *pos)
{
	uint64_t start = b->size + pad;
	int ret = reserve(b, start + size);

	if (ret)
		return ret;
	memset(ferry__fb_at(b, (uint32_t)b->size), 0, (size_t)(pad + size));
	*pos = (uint32_t)start;
	b->size = (size_t)(start + size);
	return 0;
}

int ferry__fb_build_begin(struct ferry__fb_builder *b)
{
	uint32_t root_slot;

	b->done = false;
	b->size = 0;
	return grow(b, 0, 4, &root_slot);
}

void ferry__fb_build_end(struct ferry__fb_builder *b, uint32_t root)
{
	ferry__fb_set_offset(b, 0, root);
	b->done = true;
}

int ferry__fb_build_invalid(const char *what, const char *why)
{
	FLOG_WARN("wire", "cannot build %s: %s", what, why);
	return -EINVAL;
}

int ferry__fb_build_fail(struct ferry__fb_builder *b, int err)
{
	b->done = false;
	b->size = 0;
	return err;
}

void ferry__fb_set_offset(struct ferry__fb_builder *b, uint32_t at, uint32_t target)
{
	assert(target > at && target < b->size);
	ferry__fb_store_u32(ferry__fb_at(b, at), target - at);
}

/*
 * Fields are placed by decreasing alignment right after the vtable offset, and the table
 * starts where (start + 4) is aligned to the largest field: every field is then aligned with
 * no padding, because FlatBuffers sizes are multiples of their alignment. The vtable sits
 * right in front of the table (soffset = its size).
 */
int ferry__fb_build_table(struct ferry__fb_builder *b, unsigned count,
			  const struct ferry__fb_slot *slots, uint32_t *pos, uint32_t *table)
{
	unsigned slot_count = 0;
	uint32_t max_align = 4, table_size = 4, vtable_size, t, vtable, cursor;
	uint64_t start;
	int ret;

	for (unsigned id = 0; id < count; id++) {
		pos[id] = 0;
		if (!slots[id].size)
			continue;
		assert(slots[id].align && !(slots[id].align & (slots[id].align - 1)));
		slot_count = id + 1;
		table_size += slots[id].size;
		if (slots[id].align > max_align)
			max_align = slots[id].align;
	}
	if (table_size > UINT16_MAX)
		return -E2BIG;
	vtable_size = 4 + 2 * slot_count;
	start = b->size + vtable_size;
	start += (max_align - (start + 4) % max_align) % max_align;
	ret = grow(b, start - b->size, table_size, &t);
	if (ret)
		return ret;
	vtable = t - vtable_size;
	ferry__fb_store_u16(ferry__fb_at(b, vtable), (uint16_t)vtable_size);
	ferry__fb_store_u16(ferry__fb_at(b, vtable + 2), (uint16_t)table_size);
	ferry__fb_store_i32(ferry__fb_at(b, t), (int32_t)vtable_size);
	cursor = t + 4;
	for (uint32_t align = max_align; align; align /= 2) {
		for (unsigned id = 0; id < slot_count; id++) {
			if (!slots[id].size || slots[id].align != align)
				continue;
			assert(cursor % align == 0);
			pos[id] = cursor;
			ferry__fb_store_u16(ferry__fb_at(b, vtable + 4 + 2 * id),
					    (uint16_t)(cursor - t));
			cursor += slots[id].size;
		}
	}
	*table = t;
	return 0;
}

int ferry__fb_build_string(struct ferry__fb_builder *b, const char *s, size_t len, uint32_t *pos)
{
	uint64_t pad = (4 - b->size % 4) % 4;
	int ret;

	if (len > FERRY_FB_MAX_SIZE)
		return -E2BIG;
	ret = grow(b, pad, 4 + (uint64_t)len + 1, pos);
	if (ret)
		return ret;
	ferry__fb_store_u32(ferry__fb_at(b, *pos), (uint32_t)len);
	if (len)
		memcpy(ferry__fb_at(b, *pos + 4), s, len);
	return 0;
}

int ferry__fb_build_vector(struct ferry__fb_builder *b, size_t count, uint32_t elem_size,
			   uint32_t elem_align, uint32_t *vec)
{
	uint64_t align = elem_align > 4 ? elem_align : 4;
	uint64_t pad = (align - (b->size + 4) % align) % align;
	int ret;

	if (count > UINT32_MAX || (uint64_t)count * elem_size > FERRY_FB_MAX_SIZE)
		return -E2BIG;
	ret = grow(b, pad, 4 + (uint64_t)count * elem_size, vec);
	if (ret)
		return ret;
	ferry__fb_store_u32(ferry__fb_at(b, *vec), (uint32_t)count);
	return 0;
}

/* ---- verifier ---- */

static int fail(const struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
		const char *what, const char *why, uint64_t at)
{
	FLOG_DEBUG("wire", "verify: %s%s%s: %s (at %" PRIu64 " of %zu bytes)", t ? t->name : "",
		   t ? "." : "", what, why, at, v->len);
	return -EPROTO;
}

int ferry__fb_verify_buffer(const void *buf, size_t len, ferry__fb_verify_fn root,
			    const struct ferry__fb_verify_limits *limits)
{
	struct ferry__fb_verifier v = {
		.buf = buf,
		.len = len,
		.max_depth = limits && limits->max_depth ? limits->max_depth : FERRY_FB_MAX_DEPTH,
		.max_tables =
			limits && limits->max_tables ? limits->max_tables : FERRY_FB_MAX_TABLES,
	};
	uint32_t off;

	if ((!limits || !limits->max_tables) && len / 4 > v.max_tables)
		v.max_tables = len / 4;
	if (!buf || len < 4 || len > FERRY_FB_MAX_SIZE)
		return fail(&v, NULL, "buffer", "size out of range", len);
	off = ferry__fb_load_u32(v.buf);
	if (off == 0 || off >= len)
		return fail(&v, NULL, "root", "offset out of bounds", off);
	return root(&v, off);
}

int ferry__fb_verify_enter(struct ferry__fb_verifier *v, uint32_t pos, const char *name,
			   struct ferry__fb_vtable *t)
{
	int64_t vtable;

	t->name = name;
	if (v->depth >= v->max_depth)
		return fail(v, t, "table", "nested too deep", pos);
	if (++v->tables > v->max_tables)
		return fail(v, t, "table", "too many tables", pos);
	if (pos % 4 || (uint64_t)pos + 4 > v->len)
		return fail(v, t, "table", "misaligned or out of bounds", pos);
	vtable = (int64_t)pos - ferry__fb_load_i32(v->buf + pos);
	if (vtable < 0 || vtable % 2 || (uint64_t)vtable + 4 > v->len)
		return fail(v, t, "vtable", "misaligned or out of bounds", pos);
	t->pos = pos;
	t->vtable = (uint32_t)vtable;
	t->vtable_size = ferry__fb_load_u16(v->buf + vtable);
	t->table_size = ferry__fb_load_u16(v->buf + vtable + 2);
	if (t->vtable_size < 4 || t->vtable_size % 2 || (uint64_t)vtable + t->vtable_size > v->len)
		return fail(v, t, "vtable", "bad size", t->vtable);
	if (t->table_size < 4 || (uint64_t)pos + t->table_size > v->len)
		return fail(v, t, "table", "size out of bounds", pos);
	v->depth++;
	return 0;
}

void ferry__fb_verify_leave(struct ferry__fb_verifier *v)
{
	assert(v->depth > 0);
	v->depth--;
}

/* Offset of field @id inside its table, 0 if absent. */
static uint16_t field_offset(const struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			     unsigned id)
{
	uint32_t slot = 4 + 2 * (uint32_t)id;

	if (slot + 2 > t->vtable_size)
		return 0;
	return ferry__fb_load_u16(v->buf + t->vtable + slot);
}

/* 1 and *@at = position when the field is present and sound; 0 absent; -EPROTO. */
static int inline_field(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t, unsigned id,
			uint32_t size, uint32_t align, bool required, const char *what,
			uint32_t *at)
{
	uint16_t off = field_offset(v, t, id);

	if (!off)
		return required ? fail(v, t, what, "required field missing", t->pos) : 0;
	if (off < 4 || (uint32_t)off + size > t->table_size)
		return fail(v, t, what, "field outside its table", t->pos + off);
	*at = t->pos + off;
	if (*at % align)
		return fail(v, t, what, "misaligned field", *at);
	return 1;
}

int ferry__fb_verify_inline(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, uint32_t size, uint32_t align, bool required,
			    const char *what)
{
	uint32_t at;
	int ret = inline_field(v, t, id, size, align, required, what, &at);

	return ret < 0 ? ret : 0;
}

/* Follow the uoffset stored at @at (already known to be in bounds and aligned). */
static int follow(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t, const char *what,
		  uint32_t at, uint32_t *target)
{
	uint32_t off = ferry__fb_load_u32(v->buf + at);

	if (off == 0 || off > INT32_MAX || (uint64_t)at + off >= v->len)
		return fail(v, t, what, "offset out of bounds", at);
	*target = at + off;
	return 0;
}

/* 1 and *@target when the offset field is present and its offset sound; 0 absent. */
static int offset_field(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t, unsigned id,
			bool required, const char *what, uint32_t *target)
{
	uint32_t at;
	int ret = inline_field(v, t, id, 4, 4, required, what, &at);

	if (ret <= 0)
		return ret;
	ret = follow(v, t, what, at, target);
	return ret < 0 ? ret : 1;
}

static int check_string(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			const char *what, uint32_t pos)
{
	uint64_t end;

	if (pos % 4 || (uint64_t)pos + 4 > v->len)
		return fail(v, t, what, "misaligned or out of bounds string", pos);
	end = (uint64_t)pos + 4 + ferry__fb_load_u32(v->buf + pos);
	if (end + 1 > v->len)
		return fail(v, t, what, "string longer than the buffer", pos);
	if (v->buf[end] != 0)
		return fail(v, t, what, "string without its NUL", end);
	return 0;
}

static int check_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			const char *what, uint32_t pos, uint32_t elem_size, uint32_t elem_align,
			uint32_t *count)
{
	if (pos % 4 || (uint64_t)pos + 4 > v->len)
		return fail(v, t, what, "misaligned or out of bounds vector", pos);
	*count = ferry__fb_load_u32(v->buf + pos);
	/* flatc's builder does not align an empty vector's (absent) elements */
	if (*count && (pos + 4) % elem_align)
		return fail(v, t, what, "misaligned vector elements", pos + 4);
	if ((uint64_t)pos + 4 + (uint64_t)*count * elem_size > v->len)
		return fail(v, t, what, "vector longer than the buffer", pos);
	return 0;
}

int ferry__fb_verify_string(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, bool required, const char *what)
{
	uint32_t pos;
	int ret = offset_field(v, t, id, required, what, &pos);

	return ret <= 0 ? ret : check_string(v, t, what, pos);
}

int ferry__fb_verify_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, uint32_t elem_size, uint32_t elem_align, bool required,
			    const char *what)
{
	uint32_t pos, count;
	int ret = offset_field(v, t, id, required, what, &pos);

	return ret <= 0 ? ret : check_vector(v, t, what, pos, elem_size, elem_align, &count);
}

int ferry__fb_verify_string_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				   unsigned id, bool required, const char *what)
{
	uint32_t pos, count, target;
	int ret = offset_field(v, t, id, required, what, &pos);

	if (ret <= 0)
		return ret;
	ret = check_vector(v, t, what, pos, 4, 4, &count);
	for (uint32_t i = 0; !ret && i < count; i++) {
		ret = follow(v, t, what, pos + 4 + 4 * i, &target);
		if (!ret)
			ret = check_string(v, t, what, target);
	}
	return ret;
}

int ferry__fb_verify_table_field(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				 unsigned id, bool required, const char *what,
				 ferry__fb_verify_fn fn)
{
	uint32_t pos;
	int ret = offset_field(v, t, id, required, what, &pos);

	return ret <= 0 ? ret : fn(v, pos);
}

int ferry__fb_verify_table_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				  unsigned id, bool required, const char *what,
				  ferry__fb_verify_fn fn)
{
	uint32_t pos, count, target;
	int ret = offset_field(v, t, id, required, what, &pos);

	if (ret <= 0)
		return ret;
	ret = check_vector(v, t, what, pos, 4, 4, &count);
	for (uint32_t i = 0; !ret && i < count; i++) {
		ret = follow(v, t, what, pos + 4 + 4 * i, &target);
		if (!ret)
			ret = fn(v, target);
	}
	return ret;
}
