/* SPDX-License-Identifier: Apache-2.0 */
/* The GCS binary codec: growable buffer, little-endian writer/reader, CRC32C. */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "gcs/codec.h"

void ferry__gcs_buf_fini(struct ferry__gcs_buf *b)
{
	ferry__free(b->data);
	memset(b, 0, sizeof(*b));
}

int ferry__gcs_buf_reserve(struct ferry__gcs_buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (__builtin_add_overflow(b->size, extra, &need))
		return -ENOMEM;
	if (need <= b->capacity)
		return 0;
	cap = b->capacity ? b->capacity : 256;
	while (cap < need) {
		if (__builtin_mul_overflow(cap, 2, &cap))
			return -ENOMEM;
	}
	p = ferry__realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->capacity = cap;
	return 0;
}

void *ferry__gcs_buf_grow(struct ferry__gcs_buf *b, size_t n)
{
	void *p;

	if (ferry__gcs_buf_reserve(b, n) < 0)
		return NULL;
	p = b->data + b->size;
	b->size += n;
	return p;
}

void ferry__gcs_put_raw(struct ferry__gcs_writer *w, const void *data, size_t size)
{
	void *p;

	if (w->err || size == 0)
		return;
	p = ferry__gcs_buf_grow(w->buf, size);
	if (!p) {
		w->err = -ENOMEM;
		return;
	}
	memcpy(p, data, size);
}

void ferry__gcs_put_u8(struct ferry__gcs_writer *w, uint8_t v)
{
	ferry__gcs_put_raw(w, &v, 1);
}

void ferry__gcs_put_u32(struct ferry__gcs_writer *w, uint32_t v)
{
	uint8_t b[4];

	ferry__gcs_store_u32(b, v);
	ferry__gcs_put_raw(w, b, sizeof(b));
}

void ferry__gcs_put_u64(struct ferry__gcs_writer *w, uint64_t v)
{
	uint8_t b[8];

	ferry__gcs_store_u64(b, v);
	ferry__gcs_put_raw(w, b, sizeof(b));
}

void ferry__gcs_put_f64(struct ferry__gcs_writer *w, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	ferry__gcs_put_u64(w, bits);
}

void ferry__gcs_put_bytes(struct ferry__gcs_writer *w, const void *data, size_t size)
{
	if (size > UINT32_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	ferry__gcs_put_u32(w, (uint32_t)size);
	ferry__gcs_put_raw(w, data, size);
}

void ferry__gcs_put_str(struct ferry__gcs_writer *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	ferry__gcs_put_bytes(w, s, n);
	ferry__gcs_put_u8(w, 0);
}

static const uint8_t *take(struct ferry__gcs_reader *r, size_t size)
{
	const uint8_t *p;

	if (r->err)
		return NULL;
	if (r->left < size) {
		r->err = -EPROTO;
		return NULL;
	}
	p = r->p;
	r->p += size;
	r->left -= size;
	return p;
}

void ferry__gcs_get_raw(struct ferry__gcs_reader *r, void *out, size_t size)
{
	const uint8_t *p = take(r, size);

	if (p)
		memcpy(out, p, size);
	else
		memset(out, 0, size);
}

uint8_t ferry__gcs_get_u8(struct ferry__gcs_reader *r)
{
	const uint8_t *p = take(r, 1);

	return p ? *p : 0;
}

uint32_t ferry__gcs_get_u32(struct ferry__gcs_reader *r)
{
	const uint8_t *p = take(r, 4);

	return p ? ferry__gcs_load_u32(p) : 0;
}

uint64_t ferry__gcs_get_u64(struct ferry__gcs_reader *r)
{
	const uint8_t *p = take(r, 8);

	return p ? ferry__gcs_load_u64(p) : 0;
}

double ferry__gcs_get_f64(struct ferry__gcs_reader *r)
{
	uint64_t bits = ferry__gcs_get_u64(r);
	double v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

struct ferry__gcs_slice ferry__gcs_get_bytes(struct ferry__gcs_reader *r, size_t max)
{
	struct ferry__gcs_slice s = {NULL, 0};
	uint32_t size = ferry__gcs_get_u32(r);
	const uint8_t *p;

	if (size > max && !r->err)
		r->err = -EPROTO;
	if (r->err)
		return s;
	p = take(r, size);
	if (p) {
		s.data = p;
		s.size = size;
	}
	return s;
}

const char *ferry__gcs_get_str(struct ferry__gcs_reader *r, size_t max)
{
	struct ferry__gcs_slice s = ferry__gcs_get_bytes(r, max);
	const uint8_t *nul = take(r, 1);

	if (r->err)
		return NULL;
	if (*nul != 0 || (s.size && memchr(s.data, 0, s.size))) {
		r->err = -EPROTO;
		return NULL;
	}
	/* The text is followed by its NUL in the input, so it can be used in place. */
	return s.size ? (const char *)s.data : NULL;
}

/*
 * CRC32C, reflected polynomial 0x82f63b78. x86-64 has an instruction for it (SSE4.2, 8 bytes a
 * cycle or so); elsewhere a byte-wise table. Both give the same value: the instruction computes
 * exactly this CRC.
 */
static uint32_t crc_table[256];
static int crc_hw;

__attribute__((constructor)) static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t size)
{
	while (size--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_x86(uint32_t crc, const uint8_t *p,
							  size_t size)
{
	uint64_t c = crc;

	for (; size >= 8; size -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	crc = (uint32_t)c;
	while (size--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}
#endif

uint32_t ferry__crc32c(uint32_t crc, const void *data, size_t size)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (crc_hw)
		return ~crc_x86(crc, data, size);
#endif
	return ~crc_sw(crc, data, size);
}
