/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The verifier against each corruption class: truncation at every length, bad root offset,
 * vtables out of bounds, misaligned fields and vectors, fields outside their table, strings
 * without NUL, vector lengths that overflow, missing required fields, nesting deeper than the
 * limit, offset cycles, and shared sub-tables that would make verification explode.
 * Corrupted buffers are built byte by byte where no builder would produce them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fb.h"
#include "ftest.h"
#include "wire_util.h"
#include "wt_schema_testgen.h"

static struct sample_space space;
static struct raw r;

static void build_sample(const char *table, uint32_t seed, struct ferry__fb_builder *b)
{
	const struct wt_test_table *t = wt_test_table_find(table);
	struct wt_test_pool pool = {space.pool, sizeof(space.pool), 0};

	ftest_assert_ptr_notnull(t);
	ftest_assert_ok(t->sample(&pool, seed, space.value));
	ftest_assert_ok(t->build(b, space.value));
}

/* Verify a copy of the first @len bytes in a buffer of exactly that size (ASan sees any
 * read past the end). */
static int verify_exact(int (*verify)(const void *, size_t), const uint8_t *buf, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	int ret;

	ftest_assert_ptr_notnull(copy);
	memcpy(copy, buf, len);
	ret = verify(copy, len);
	free(copy);
	return ret;
}

FTEST(truncation_at_every_length_is_rejected)
{
	struct ferry__fb_builder b = {0};

	for (size_t i = 0; i < wt_test_table_count; i++) {
		const struct wt_test_table *t = &wt_test_tables[i];

		for (uint32_t seed = 0; seed < 40; seed++) {
			build_sample(t->name, seed, &b);
			ftest_assert_ok(verify_exact(t->verify, ferry__fb_builder_data(&b),
						     ferry__fb_builder_size(&b)));
			for (size_t len = 0; len < ferry__fb_builder_size(&b); len++)
				ftest_assert_errno(
					verify_exact(t->verify, ferry__fb_builder_data(&b), len),
					-EPROTO);
		}
	}
	ferry__fb_builder_fini(&b);
}

FTEST(missing_or_tiny_buffers_are_rejected)
{
	static const uint8_t three[3];

	ftest_assert_errno(wt_node_verify(NULL, 0), -EPROTO);
	ftest_assert_errno(wt_node_verify(three, 0), -EPROTO);
	ftest_assert_errno(wt_node_verify(three, sizeof(three)), -EPROTO);
}

/* A Node {value: @value} by hand: root offset, vtable at 4, table at 12. */
static uint32_t craft_node(void)
{
	memset(&r, 0, sizeof(r));
	raw_u32(&r, 0, 12);
	raw_u16(&r, 4, 4 + 2 * 2); /* vtable: slots for name and value */
	raw_u16(&r, 6, 8);	   /* table size */
	raw_u16(&r, 8, 0);	   /* name absent */
	raw_u16(&r, 10, 4);	   /* value at table + 4 */
	raw_u32(&r, 12, 12 - 4);   /* soffset to the vtable */
	raw_u32(&r, 16, 77);	   /* value */
	return 12;
}

FTEST(hand_made_buffer_is_valid)
{
	struct wt_node_view v;

	craft_node();
	ftest_assert_ok(wt_node_root(r.b, r.len, &v));
	ftest_assert_int_eq(wt_node_value(v), 77);
}

FTEST(bad_root_offset_is_rejected)
{
	static const uint32_t bad[] = {0, 2, 13, 20, 0x7ffffffc, 0xfffffffc, 0xffffffff};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		craft_node();
		raw_u32(&r, 0, bad[i]);
		ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	}
}

FTEST(vtable_out_of_bounds_or_malformed_is_rejected)
{
	/* soffset: vtable before the buffer, after it, misaligned */
	static const int32_t soffsets[] = {14, 16, -12, -1000, 7, INT32_MIN, INT32_MAX};

	for (size_t i = 0; i < sizeof(soffsets) / sizeof(soffsets[0]); i++) {
		craft_node();
		raw_u32(&r, 12, (uint32_t)soffsets[i]);
		ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	}
	craft_node();
	raw_u16(&r, 4, 3); /* vtable size below its header */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_node();
	raw_u16(&r, 4, 7); /* odd */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_node();
	raw_u16(&r, 4, 1000); /* past the end */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_node();
	raw_u16(&r, 6, 3); /* table smaller than its soffset */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_node();
	raw_u16(&r, 6, 12); /* table past the end */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
}

FTEST(field_outside_its_table_is_rejected)
{
	craft_node();
	raw_u16(&r, 10, 6); /* value would end at table + 10 > table size 8 */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_node();
	raw_u16(&r, 10, 2); /* overlaps the soffset */
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
}

/* Scalars with only u64 (field id 8) at table + @field_off; vtable at 4, table at 32. */
static void craft_u64(uint16_t field_off)
{
	memset(&r, 0, sizeof(r));
	raw_u32(&r, 0, 32);
	raw_u16(&r, 4, 4 + 2 * 9);
	raw_u16(&r, 6, 16);
	raw_u16(&r, 8 + 2 * 8, field_off);
	raw_u32(&r, 32, 32 - 4);
	raw_u64(&r, 32 + field_off, 0x1122334455667788);
	r.len = 48;
}

FTEST(misaligned_scalar_is_rejected)
{
	struct wt_scalars_view v;

	craft_u64(8);
	ftest_assert_ok(wt_scalars_root(r.b, r.len, &v));
	ftest_assert_uint_eq(wt_scalars_u64(v), 0x1122334455667788);
	craft_u64(4);
	ftest_assert_errno(wt_scalars_verify(r.b, r.len), -EPROTO);
}

/* Where the NUL of string @s lies in @r (the string must occur once). */
static size_t find_string_end(const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i + n < r.len; i++)
		if (memcmp(r.b + i, s, n) == 0 && r.b[i + n] == 0)
			return i + n;
	FTEST__FAIL("string %s not found", s);
}

FTEST(string_without_nul_or_too_long_is_rejected)
{
	struct wt_node n = {.name = "unterminated"};
	struct ferry__fb_builder b = {0};
	size_t end;

	ftest_assert_ok(wt_node_build(&b, &n));
	raw_from_builder(&r, &b);
	end = find_string_end("unterminated");
	r.b[end] = 'x';
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	raw_from_builder(&r, &b);
	/* the length field sits 4 bytes before the first character */
	raw_u32(&r, end - strlen("unterminated") - 4, (uint32_t)r.len);
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	raw_u32(&r, end - strlen("unterminated") - 4, UINT32_MAX);
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	ferry__fb_builder_fini(&b);
}

/* Build an Everything with an i64 vector; returns the position of the vector's offset. */
static uint32_t everything_with_i64s(struct ferry__fb_builder *b)
{
	static const int64_t values[] = {1, 2};
	struct wt_scalars sc = {0};
	struct wt_everything e = {.scalars = &sc, .label = "x", .i64s = values, .i64s_count = 2};
	uint32_t field;

	ftest_assert_ok(wt_everything_build(b, &e));
	raw_from_builder(&r, b);
	field = raw_field(&r, ferry__fb_load_u32(r.b), 8);
	ftest_assert_uint_ne(field, 0);
	return field;
}

FTEST(vector_length_overflow_is_rejected)
{
	static const uint32_t counts[] = {5, 0x20000000, 0x7fffffff, 0xffffffff};
	struct ferry__fb_builder b = {0};
	uint32_t field, vec;

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		field = everything_with_i64s(&b);
		vec = ferry__fb_deref(r.b, field);
		ftest_assert_ok(wt_everything_verify(r.b, r.len));
		raw_u32(&r, vec, counts[i]);
		ftest_assert_errno(wt_everything_verify(r.b, r.len), -EPROTO);
	}
	ferry__fb_builder_fini(&b);
}

FTEST(misaligned_vector_elements_are_rejected)
{
	struct ferry__fb_builder b = {0};
	uint32_t field = everything_with_i64s(&b), vec = ferry__fb_deref(r.b, field);

	/* Point the offset 4 bytes further: the count is still 4-aligned, the int64 elements
	 * after it are not. */
	raw_u64(&r, vec + 4, 1);
	raw_u32(&r, field, vec + 4 - field);
	ftest_assert_errno(wt_everything_verify(r.b, r.len), -EPROTO);
	ferry__fb_builder_fini(&b);
}

FTEST(missing_required_field_is_rejected)
{
	struct ferry__fb_builder b = {0};
	uint32_t table;

	everything_with_i64s(&b);
	table = ferry__fb_load_u32(r.b);
	raw_u16(&r, raw_vtable(&r, table) + 4 + 2 * 17, 0); /* label */
	ftest_assert_errno(wt_everything_verify(r.b, r.len), -EPROTO);
	ferry__fb_builder_fini(&b);
}

/*
 * A chain of @n Nodes sharing one vtable: table i at 20 + 8 i is [soffset][offset to i + 1];
 * the last one uses an empty vtable. Nothing a builder would write (it never shares), all
 * valid FlatBuffers.
 */
static void craft_chain(unsigned n)
{
	memset(&r, 0, sizeof(r));
	raw_u32(&r, 0, 20);
	raw_u16(&r, 4, 4 + 2 * 3);
	raw_u16(&r, 6, 8);
	raw_u16(&r, 8 + 2 * 2, 4); /* child at table + 4 */
	raw_u16(&r, 16, 4);
	raw_u16(&r, 18, 4);
	for (unsigned i = 0; i < n; i++) {
		uint32_t t = 20 + 8 * i;

		if (i + 1 < n) {
			raw_u32(&r, t, t - 4);
			raw_u32(&r, t + 4, 4);
		} else {
			raw_u32(&r, t, t - 16);
		}
	}
	ftest_assert_uint_le(r.len, sizeof(r.b));
}

FTEST(nesting_deeper_than_the_limit_is_rejected)
{
	struct ferry__fb_verify_limits lim = {.max_depth = 10};
	struct wt_node_view v;

	craft_chain(FERRY_FB_MAX_DEPTH);
	ftest_assert_ok(wt_node_root(r.b, r.len, &v));
	ftest_assert_int_eq(wt_node_has_child(wt_node_child(v)), 1);
	craft_chain(FERRY_FB_MAX_DEPTH + 1);
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_chain(1000);
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	craft_chain(10);
	ftest_assert_ok(wt_node_verify_limits(r.b, r.len, &lim));
	craft_chain(11);
	ftest_assert_errno(wt_node_verify_limits(r.b, r.len, &lim), -EPROTO);
}

FTEST(offset_cycles_are_rejected)
{
	/* Offsets are unsigned and forward; a cycle needs one that wraps around (32-bit
	 * arithmetic would land back on the table) or that points at itself. */
	static const uint32_t cyclic[] = {0, 0xfffffffc, 0xfffffff8, 0x80000000};

	for (size_t i = 0; i < sizeof(cyclic) / sizeof(cyclic[0]); i++) {
		craft_chain(3);
		raw_u32(&r, 28 + 4, cyclic[i]); /* second table's child offset */
		ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	}
}

/*
 * @levels tables, each with a children vector of @fanout offsets that all point at the next
 * level's table: verifying walks fanout^levels tables unless something bounds it.
 */
static void craft_dag(unsigned levels, unsigned fanout)
{
	uint32_t p = 20;

	memset(&r, 0, sizeof(r));
	raw_u32(&r, 0, p);
	raw_u16(&r, 4, 4 + 2 * 4);
	raw_u16(&r, 6, 8);
	raw_u16(&r, 8 + 2 * 3, 4); /* children at table + 4 */
	raw_u16(&r, 16, 4);	   /* leaf vtable */
	raw_u16(&r, 18, 4);
	for (unsigned level = 0; level < levels; level++) {
		uint32_t next = p + 12 + 4 * fanout;

		raw_u32(&r, p, p - 4);
		raw_u32(&r, p + 4, 4); /* vector right after the table */
		raw_u32(&r, p + 8, fanout);
		for (unsigned i = 0; i < fanout; i++)
			raw_u32(&r, p + 12 + 4 * i, next - (p + 12 + 4 * i));
		p = next;
	}
	raw_u32(&r, p, p - 16);
	ftest_assert_uint_le(r.len, sizeof(r.b));
}

FTEST(shared_subtables_are_bounded_by_the_table_count)
{
	/* 1 + 4 + 16 + 64 = 85 table visits */
	struct ferry__fb_verify_limits exact = {.max_tables = 85}, less = {.max_tables = 84};

	craft_dag(3, 4);
	ftest_assert_ok(wt_node_verify_limits(r.b, r.len, &exact));
	ftest_assert_errno(wt_node_verify_limits(r.b, r.len, &less), -EPROTO);
	/* 4^30 visits without the bound: the default refuses it quickly */
	craft_dag(30, 4);
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
}

FTEST(failure_is_logged_with_what_and_where)
{
	struct wt_node n = {.name = "abc"};
	struct ferry__fb_builder b = {0};

	ftest_assert_ok(wt_node_build(&b, &n));
	raw_from_builder(&r, &b);
	r.b[find_string_end("abc")] = '!';
	ftest_log_capture_start();
	ftest_assert_ok(ferry_log_configure("wire=debug"));
	ftest_assert_errno(wt_node_verify(r.b, r.len), -EPROTO);
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "Node.name") != NULL);
	ftest_assert_true(strstr(ftest_log_captured(), "NUL") != NULL);
	ferry__fb_builder_fini(&b);
}

/* Random corruption: whatever the verifier accepts must be safe to read in full. */
FTEST(random_corruption_is_rejected_or_safe_to_read)
{
	struct ferry__fb_builder b = {0};
	uint64_t rng = 12345;
	unsigned accepted = 0, rejected = 0;

	for (size_t i = 0; i < wt_test_table_count; i++) {
		const struct wt_test_table *t = &wt_test_tables[i];

		for (uint32_t seed = 2; seed < 12; seed++) {
			build_sample(t->name, seed, &b);
			for (int round = 0; round < 300; round++) {
				uint8_t *copy;
				size_t len = ferry__fb_builder_size(&b);

				raw_from_builder(&r, &b);
				for (int k = 0; k < 1 + round % 4; k++) {
					rng = rng * 6364136223846793005u + 1442695040888963407u;
					r.b[(rng >> 33) % len] ^=
						(uint8_t)(1u << ((rng >> 20) % 8));
				}
				copy = malloc(len);
				ftest_assert_ptr_notnull(copy);
				memcpy(copy, r.b, len);
				if (t->verify(copy, len) == 0) {
					(void)t->walk(copy);
					accepted++;
				} else {
					rejected++;
				}
				free(copy);
			}
		}
	}
	ftest_log("%u corrupted buffers rejected, %u accepted and read", rejected, accepted);
	ftest_assert_uint_gt(rejected, 0);
	ferry__fb_builder_fini(&b);
}
