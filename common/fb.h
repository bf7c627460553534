/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ferry's own FlatBuffers runtime: a builder, a verifier and readers for the standard binary
 * format (readable by flatc-generated code, and reading what it writes). Typed accessors and
 * builders for each table come from the schemas (schema/NAME.fbs) through tools/fbsgen.py; this header is the
 * machinery they call.
 *
 * DESIGN
 * - Format facts: a buffer starts with a uint32 offset to the root table. A table starts with
 *   an int32 that, subtracted from the table's position, gives its vtable: uint16 vtable size,
 *   uint16 table size, then one uint16 per field id (offset of the field inside the table,
 *   0 = absent). Offsets to strings, vectors and sub-tables are uint32 relative to where they
 *   are stored and always point forward. A string is a uint32 length, bytes and a NUL; a vector
 *   a uint32 count and the elements. Everything is little-endian and aligned to its size
 *   relative to the start of the buffer.
 * - The builder writes front to back (parents first, offsets patched when the child is
 *   written), so it can take a whole message as a C struct in one call; the output is the same
 *   format as flatc's back-to-front builder. It keeps FERRY_FB_HEADROOM bytes in front of the
 *   payload so that a frame header can be put there without a copy (frame.h).
 * - The verifier checks a buffer completely before anything reads it: every offset, length,
 *   alignment, vtable, field size against the table size, string terminator, vector bounds,
 *   required field; nesting depth and the number of tables visited are bounded (offsets that
 *   share a sub-table could otherwise make verification exponential). Readers then trust it:
 *   they do unchecked, memcpy-based little-endian loads (no unaligned access UB).
 *
 * Thread model: a builder or verifier belongs to one thread; readers of a verified buffer
 * are pure functions.
 */
#ifndef FERRY_COMMON_FB_H
#define FERRY_COMMON_FB_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest buffer the format can address (offsets are < 2^31). */
#define FERRY_FB_MAX_SIZE 0x7fffffffu
/*
 * Verifier defaults: nested tables, and tables visited per buffer. A table takes at least 4
 * bytes, so a buffer whose offsets do not share sub-tables has at most len / 4 of them: the
 * default table limit is the larger of FERRY_FB_MAX_TABLES and len / 4, which no honest
 * buffer reaches and which keeps verification linear in the buffer size.
 */
#define FERRY_FB_MAX_DEPTH 64
#define FERRY_FB_MAX_TABLES 100000
/* Bytes the builder keeps free in front of the payload (a frame header fits). */
#define FERRY_FB_HEADROOM 8

/* ---- little-endian loads and stores (any alignment) ---- */

static inline uint8_t ferry__fb_load_u8(const uint8_t *p)
{
	return p[0];
}

static inline uint16_t ferry__fb_load_u16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline uint32_t ferry__fb_load_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline uint64_t ferry__fb_load_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline int8_t ferry__fb_load_i8(const uint8_t *p)
{
	return (int8_t)p[0];
}

static inline int16_t ferry__fb_load_i16(const uint8_t *p)
{
	return (int16_t)ferry__fb_load_u16(p);
}

static inline int32_t ferry__fb_load_i32(const uint8_t *p)
{
	return (int32_t)ferry__fb_load_u32(p);
}

static inline int64_t ferry__fb_load_i64(const uint8_t *p)
{
	return (int64_t)ferry__fb_load_u64(p);
}

static inline bool ferry__fb_load_bool(const uint8_t *p)
{
	return p[0] != 0;
}

static inline float ferry__fb_load_f32(const uint8_t *p)
{
	uint32_t bits = ferry__fb_load_u32(p);
	float v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

static inline double ferry__fb_load_f64(const uint8_t *p)
{
	uint64_t bits = ferry__fb_load_u64(p);
	double v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

static inline void ferry__fb_store_u8(uint8_t *p, uint8_t v)
{
	p[0] = v;
}

static inline void ferry__fb_store_u16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void ferry__fb_store_u32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void ferry__fb_store_u64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static inline void ferry__fb_store_i8(uint8_t *p, int8_t v)
{
	p[0] = (uint8_t)v;
}

static inline void ferry__fb_store_i16(uint8_t *p, int16_t v)
{
	ferry__fb_store_u16(p, (uint16_t)v);
}

static inline void ferry__fb_store_i32(uint8_t *p, int32_t v)
{
	ferry__fb_store_u32(p, (uint32_t)v);
}

static inline void ferry__fb_store_i64(uint8_t *p, int64_t v)
{
	ferry__fb_store_u64(p, (uint64_t)v);
}

static inline void ferry__fb_store_bool(uint8_t *p, bool v)
{
	p[0] = v ? 1 : 0;
}

static inline void ferry__fb_store_f32(uint8_t *p, float v)
{
	uint32_t bits;

	memcpy(&bits, &v, sizeof(bits));
	ferry__fb_store_u32(p, bits);
}

static inline void ferry__fb_store_f64(uint8_t *p, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	ferry__fb_store_u64(p, bits);
}

/* ---- readers: only on buffers the verifier accepted ---- */

/* A table inside a verified buffer. buf == NULL is the absent table: every field reads as
 * absent (defaults, NULL strings, empty vectors). */
struct ferry__fb_table {
	const uint8_t *buf; /* start of the verified buffer */
	uint32_t pos;	    /* table position in it */
};

/* The table a verified buffer's root offset points at. */
static inline struct ferry__fb_table ferry__fb_root(const void *buf)
{
	struct ferry__fb_table t;

	t.buf = (const uint8_t *)buf;
	t.pos = ferry__fb_load_u32(t.buf);
	return t;
}

/* Position of field @id's inline data in the buffer, or 0 when the field is absent. */
static inline uint32_t ferry__fb_field(struct ferry__fb_table t, unsigned id)
{
	uint32_t vtable, slot;
	uint16_t vtable_size, off;

	if (!t.buf)
		return 0;
	vtable = t.pos - (uint32_t)ferry__fb_load_i32(t.buf + t.pos);
	vtable_size = ferry__fb_load_u16(t.buf + vtable);
	slot = 4 + 2 * (uint32_t)id;
	if (slot + 2 > vtable_size)
		return 0;
	off = ferry__fb_load_u16(t.buf + vtable + slot);
	return off ? t.pos + off : 0;
}

/* Follow the uoffset stored at @pos. */
static inline uint32_t ferry__fb_deref(const uint8_t *buf, uint32_t pos)
{
	return pos + ferry__fb_load_u32(buf + pos);
}

/* Sub-table in field @id (absent table when the field is absent). */
static inline struct ferry__fb_table ferry__fb_table_field(struct ferry__fb_table t, unsigned id)
{
	struct ferry__fb_table sub;
	uint32_t p = ferry__fb_field(t, id);

	sub.buf = p ? t.buf : NULL;
	sub.pos = p ? ferry__fb_deref(t.buf, p) : 0;
	return sub;
}

/* String in field @id: NUL-terminated (it may also contain NULs; see _len), NULL if absent. */
static inline const char *ferry__fb_string(struct ferry__fb_table t, unsigned id)
{
	uint32_t p = ferry__fb_field(t, id);

	return p ? (const char *)t.buf + ferry__fb_deref(t.buf, p) + 4 : NULL;
}

static inline uint32_t ferry__fb_string_len(struct ferry__fb_table t, unsigned id)
{
	uint32_t p = ferry__fb_field(t, id);

	return p ? ferry__fb_load_u32(t.buf + ferry__fb_deref(t.buf, p)) : 0;
}

/* Vector in field @id: its element count (0 if absent) and the position of element 0. */
static inline uint32_t ferry__fb_vector_count(struct ferry__fb_table t, unsigned id)
{
	uint32_t p = ferry__fb_field(t, id);

	return p ? ferry__fb_load_u32(t.buf + ferry__fb_deref(t.buf, p)) : 0;
}

static inline uint32_t ferry__fb_vector_data(struct ferry__fb_table t, unsigned id)
{
	uint32_t p = ferry__fb_field(t, id);

	return p ? ferry__fb_deref(t.buf, p) + 4 : 0;
}

/*
 * Position of element @i (of @elem_size bytes) of the vector in field @id, or 0 when the
 * vector is absent or @i is out of range (the accessors then return a zero value).
 */
static inline uint32_t ferry__fb_vector_elem(struct ferry__fb_table t, unsigned id, uint32_t i,
					     uint32_t elem_size)
{
	uint32_t p = ferry__fb_field(t, id), vec;

	if (!p)
		return 0;
	vec = ferry__fb_deref(t.buf, p);
	if (i >= ferry__fb_load_u32(t.buf + vec))
		return 0;
	return vec + 4 + i * elem_size;
}

/* ---- verifier ---- */

struct ferry__fb_verifier {
	const uint8_t *buf; /* buffer under test */
	size_t len;	    /* its size in bytes */
	unsigned depth;	    /* tables currently open (nesting) */
	unsigned max_depth; /* deepest nesting accepted */
	size_t tables;	    /* tables visited so far */
	size_t max_tables;  /* most tables visited before giving up */
};

/* A table whose header and vtable have been checked. */
struct ferry__fb_vtable {
	uint32_t pos;	      /* table position */
	uint32_t vtable;      /* vtable position */
	uint16_t vtable_size; /* vtable bytes (4 + 2 per field slot) */
	uint16_t table_size;  /* table bytes, including the vtable offset */
	const char *name;     /* table name, for failure logs */
};

/* Checks the table at @pos (the root, or a sub-table): generated per table by fbsgen. */
typedef int (*ferry__fb_verify_fn)(struct ferry__fb_verifier *v, uint32_t pos);

struct ferry__fb_verify_limits {
	unsigned max_depth; /* 0: FERRY_FB_MAX_DEPTH */
	size_t max_tables;  /* 0: max(FERRY_FB_MAX_TABLES, len / 4) */
};

/*
 * ferry__fb_verify_buffer() - check that @buf holds a root table that @root accepts.
 * @limits may be NULL (defaults). Returns 0 or -EPROTO, with a debug log line ("wire")
 * saying what failed and where.
 */
int ferry__fb_verify_buffer(const void *buf, size_t len, ferry__fb_verify_fn root,
			    const struct ferry__fb_verify_limits *limits);

/* For generated verifiers. Each returns 0 or -EPROTO (logged). @what names the field. */
int ferry__fb_verify_enter(struct ferry__fb_verifier *v, uint32_t pos, const char *name,
			   struct ferry__fb_vtable *t);
void ferry__fb_verify_leave(struct ferry__fb_verifier *v);
/* Inline field (scalar or struct) of @size bytes aligned to @align. */
int ferry__fb_verify_inline(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, uint32_t size, uint32_t align, bool required,
			    const char *what);
int ferry__fb_verify_string(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, bool required, const char *what);
/* Vector of scalars or structs. */
int ferry__fb_verify_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
			    unsigned id, uint32_t elem_size, uint32_t elem_align, bool required,
			    const char *what);
int ferry__fb_verify_string_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				   unsigned id, bool required, const char *what);
int ferry__fb_verify_table_field(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				 unsigned id, bool required, const char *what,
				 ferry__fb_verify_fn fn);
int ferry__fb_verify_table_vector(struct ferry__fb_verifier *v, const struct ferry__fb_vtable *t,
				  unsigned id, bool required, const char *what,
				  ferry__fb_verify_fn fn);

/* ---- builder ---- */

/*
 * One message at a time: each generated <table>_build() call starts over and leaves the
 * finished payload in the builder, valid until the next build or fini. The buffer is kept
 * and reused, so a long-lived builder stops allocating once it has seen its largest message.
 * Zero-initialised (or ferry__fb_builder_init) is ready to use.
 */
struct ferry__fb_builder {
	uint8_t *buf; /* ferry__malloc'd: FERRY_FB_HEADROOM bytes, then the payload */
	size_t cap;   /* bytes allocated */
	size_t size;  /* payload bytes written */
	bool done;    /* a finished payload is in buf */
};

void ferry__fb_builder_init(struct ferry__fb_builder *b);
/* Free the buffer; the builder may be used again (it is re-initialised). */
void ferry__fb_builder_fini(struct ferry__fb_builder *b);
/* The finished payload (NULL and 0 when the last build failed or none ran). */
const uint8_t *ferry__fb_builder_data(const struct ferry__fb_builder *b);
size_t ferry__fb_builder_size(const struct ferry__fb_builder *b);
/* The payload with the FERRY_FB_HEADROOM bytes in front of it (frame.c writes them). */
uint8_t *ferry__fb_builder_headroom(struct ferry__fb_builder *b);

/*
 * For generated builders. Positions are payload offsets. Pointers from ferry__fb_at() are
 * valid until the next allocation. All return 0, -ENOMEM, or -E2BIG (past FERRY_FB_MAX_SIZE).
 */
int ferry__fb_build_begin(struct ferry__fb_builder *b);
void ferry__fb_build_end(struct ferry__fb_builder *b, uint32_t root);
/* A caller's message is unusable (@what: "Table.field"): logs why, returns -EINVAL. */
int ferry__fb_build_invalid(const char *what, const char *why);
/* Lay a failed build to rest (the payload reads as empty). Returns @err for chaining. */
int ferry__fb_build_fail(struct ferry__fb_builder *b, int err);
static inline uint8_t *ferry__fb_at(struct ferry__fb_builder *b, uint32_t pos)
{
	return b->buf + FERRY_FB_HEADROOM + pos;
}
/* Store at @at the uoffset to @target (> @at). */
void ferry__fb_set_offset(struct ferry__fb_builder *b, uint32_t at, uint32_t target);

/* One field id of a table being built: @size 0 = absent. */
struct ferry__fb_slot {
	uint16_t size;	/* inline bytes (4 for offsets) */
	uint16_t align; /* alignment of the inline bytes */
};

/*
 * ferry__fb_build_table() - write a vtable and a zeroed table for fields @slots[0..@count).
 * @pos[id] receives each present field's position (0 for absent ones); *@table the table's.
 */
int ferry__fb_build_table(struct ferry__fb_builder *b, unsigned count,
			  const struct ferry__fb_slot *slots, uint32_t *pos, uint32_t *table);
/* Copy @len bytes of @s plus a NUL. */
int ferry__fb_build_string(struct ferry__fb_builder *b, const char *s, size_t len, uint32_t *pos);
/* A vector of @count zeroed elements. *@vec is the position of its count (what offsets
 * point at); element 0 starts at *@vec + 4, aligned to @elem_align. */
int ferry__fb_build_vector(struct ferry__fb_builder *b, size_t count, uint32_t elem_size,
			   uint32_t elem_align, uint32_t *vec);

/* A message type and its root verifier: generated for the MessageType enum. */
struct ferry__fb_message_info {
	uint16_t type;				    /* MessageType value */
	const char *name;			    /* table name */
	int (*verify)(const void *buf, size_t len); /* root verifier */
	/* 0: the payload is a FlatBuffer of the table; else a struct-framed message (schema
	 * attribute framed_struct): a struct of this many bytes, then raw bytes */
	uint32_t framed_bytes;
};

#ifdef __cplusplus
}
#endif
#endif
