/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The FlatBuffers builder and readers on the test schema (test_types.fbs): round trips of
 * every table from generated samples, defaults, required fields, limits, argument errors,
 * and allocation failure at every allocation of the builder.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "ftest.h"
#include "wire_util.h"
#include "wt_schema_testgen.h"

static struct sample_space space;

/* Sample table @t with @seed into space.value; asserts the pool was big enough. */
static void sample(const struct wt_test_table *t, uint32_t seed)
{
	struct wt_test_pool pool = {space.pool, sizeof(space.pool), 0};

	ftest_assert_uint_le(t->value_size, sizeof(space.value));
	ftest_assert_ok(t->sample(&pool, seed, space.value));
}

static void build_verify_check(const struct wt_test_table *t, struct ferry__fb_builder *b)
{
	const char *bad;

	ftest_assert_ok(t->build(b, space.value));
	ftest_assert_ok(t->verify(ferry__fb_builder_data(b), ferry__fb_builder_size(b)));
	bad = t->check(ferry__fb_builder_data(b), space.value);
	if (bad)
		FTEST__FAIL("%s: field %s differs after the round trip", t->name, bad);
	(void)t->walk(ferry__fb_builder_data(b));
}

FTEST(every_table_round_trips_for_many_seeds)
{
	struct ferry__fb_builder b;

	ferry__fb_builder_init(&b);
	for (size_t i = 0; i < wt_test_table_count; i++) {
		for (uint32_t seed = 0; seed < 300; seed++) {
			sample(&wt_test_tables[i], seed);
			build_verify_check(&wt_test_tables[i], &b);
		}
	}
	ferry__fb_builder_fini(&b);
}

FTEST(scalars_equal_to_defaults_are_omitted_and_read_back)
{
	struct wt_scalars s = {.b = true,
			       .i8 = -5,
			       .u8 = 200,
			       .i16 = -300,
			       .u16 = 60000,
			       .i32 = -70000,
			       .u32 = 4000000000u,
			       .i64 = -5000000000,
			       .u64 = UINT64_MAX,
			       .f32 = 1.5f,
			       .f64 = -2.25,
			       .color = WT_COLOR_BLUE,
			       .wide = WT_WIDE_SMALL,
			       .after_old = 3,
			       .i64min = INT64_MIN};
	struct ferry__fb_builder b = {0};
	struct wt_scalars_view v;

	ftest_assert_ok(wt_scalars_build(&b, &s));
	ftest_assert_ok(
		wt_scalars_root(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b), &v));
	/* root offset + empty vtable (4) + table (4) */
	ftest_assert_uint_eq(ferry__fb_builder_size(&b), 12);
	ftest_assert_false(wt_scalars_has_u64(v));
	ftest_assert_true(wt_scalars_b(v));
	ftest_assert_int_eq(wt_scalars_i8(v), -5);
	ftest_assert_uint_eq(wt_scalars_u16(v), 60000);
	ftest_assert_uint_eq(wt_scalars_u32(v), 4000000000u);
	ftest_assert_int_eq(wt_scalars_i64(v), -5000000000);
	ftest_assert_uint_eq(wt_scalars_u64(v), UINT64_MAX);
	ftest_assert_true(wt_scalars_f32(v) == 1.5f);
	ftest_assert_true(wt_scalars_f64(v) == -2.25);
	ftest_assert_int_eq(wt_scalars_color(v), WT_COLOR_BLUE);
	ftest_assert_uint_eq(wt_scalars_wide(v), WT_WIDE_SMALL);
	ftest_assert_int_eq(wt_scalars_after_old(v), 3);
	ftest_assert_int_eq(wt_scalars_i64min(v), INT64_MIN);
	ferry__fb_builder_fini(&b);
}

FTEST(zero_values_differ_from_defaults_and_are_written)
{
	struct wt_scalars s = {0};
	struct ferry__fb_builder b = {0};
	struct wt_scalars_view v;

	ftest_assert_ok(wt_scalars_build(&b, &s));
	ftest_assert_ok(
		wt_scalars_root(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b), &v));
	ftest_assert_true(wt_scalars_has_b(v));
	ftest_assert_false(wt_scalars_b(v));
	ftest_assert_uint_eq(wt_scalars_u64(v), 0);
	ftest_assert_int_eq(wt_scalars_color(v), WT_COLOR_GREEN);
	ftest_assert_false(wt_scalars_has_zero(v)); /* default 0: omitted */
	ftest_assert_int_eq(wt_scalars_zero(v), 0);
	/* the deprecated field (id 14) is never written */
	ftest_assert_uint_eq(ferry__fb_field(v.tab, 14), 0);
	ferry__fb_builder_fini(&b);
}

FTEST(absent_table_view_reads_as_defaults)
{
	struct wt_everything_view none = {{NULL, 0}};
	struct wt_scalars_view sv = wt_everything_scalars(none);

	ftest_assert_false(wt_everything_has_name(none));
	ftest_assert_ptr_null(wt_everything_name(none));
	ftest_assert_uint_eq(wt_everything_name_len(none), 0);
	ftest_assert_uint_eq(wt_everything_tags_count(none), 0);
	ftest_assert_ptr_null(wt_everything_tags_at(none, 0));
	ftest_assert_ptr_null(wt_everything_raw_data(none));
	ftest_assert_int_eq(wt_scalars_i16(sv), -300);
	ftest_assert_uint_eq(wt_everything_outer(none).x, 0);
}

FTEST(vectors_strings_structs_and_nested_tables_read_back)
{
	static const uint8_t raw[] = {0, 1, 0xfe, 0xff};
	static const int64_t big[] = {INT64_MIN, -1, INT64_MAX};
	static const char *const tags[] = {"", "one", "two words"};
	struct wt_node kids[2] = {{.name = "left", .value = 1}, {.name = "right", .value = 2}};
	struct wt_node tree = {.name = "root", .children = kids, .children_count = 2};
	struct wt_scalars sc = {.i32 = 7};
	struct wt_everything e = {.scalars = &sc,
				  .label = "L",
				  .raw = raw,
				  .raw_count = 4,
				  .i64s = big,
				  .i64s_count = 3,
				  .tags = tags,
				  .tags_count = 3,
				  .tree = &tree};
	struct ferry__fb_builder b = {0};
	struct wt_everything_view v;
	struct wt_node_view t;

	e.outer.inner.b[2] = 0xdeadbeef;
	e.outer.w[1] = 0.5;
	e.outer.c = WT_COLOR_RED;
	ftest_assert_ok(wt_everything_build(&b, &e));
	ftest_assert_ok(
		wt_everything_root(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b), &v));
	ftest_assert_str_eq(wt_everything_label(v), "L");
	ftest_assert_int_eq(wt_scalars_i32(wt_everything_scalars(v)), 7);
	ftest_assert_uint_eq(wt_everything_raw_count(v), 4);
	ftest_assert_mem_eq(wt_everything_raw_data(v), raw, 4);
	ftest_assert_int_eq(wt_everything_i64s_at(v, 0), INT64_MIN);
	ftest_assert_int_eq(wt_everything_i64s_at(v, 2), INT64_MAX);
	ftest_assert_int_eq(wt_everything_i64s_at(v, 3), 0); /* out of range: zero */
	ftest_assert_str_eq(wt_everything_tags_at(v, 0), "");
	ftest_assert_str_eq(wt_everything_tags_at(v, 2), "two words");
	ftest_assert_uint_eq(wt_everything_tags_at_len(v, 2), 9);
	ftest_assert_uint_eq(wt_everything_outer(v).inner.b[2], 0xdeadbeef);
	ftest_assert_true(wt_everything_outer(v).w[1] == 0.5);
	ftest_assert_int_eq(wt_everything_outer(v).c, WT_COLOR_RED);
	ftest_assert_false(wt_everything_has_nodes(v));
	t = wt_everything_tree(v);
	ftest_assert_str_eq(wt_node_name(t), "root");
	ftest_assert_uint_eq(wt_node_children_count(t), 2);
	ftest_assert_str_eq(wt_node_name(wt_node_children_at(t, 1)), "right");
	ftest_assert_int_eq(wt_node_value(wt_node_children_at(t, 1)), 2);
	ftest_assert_false(wt_node_has_child(t));
	ftest_assert_ptr_null(wt_node_children_at(t, 2).tab.buf);
	ferry__fb_builder_fini(&b);
}

FTEST(builder_reuse_gives_identical_bytes)
{
	const struct wt_test_table *t = wt_test_table_find("Everything");
	struct wt_node other = {.name = "other"};
	struct ferry__fb_builder b = {0};
	uint8_t *first;
	size_t n;

	ftest_assert_ptr_notnull(t);
	sample(t, 42);
	ftest_assert_ok(t->build(&b, space.value));
	n = ferry__fb_builder_size(&b);
	first = malloc(n);
	ftest_assert_ptr_notnull(first);
	memcpy(first, ferry__fb_builder_data(&b), n);
	/* something else in between, then the same message again */
	ftest_assert_ok(wt_node_build(&b, &other));
	ftest_assert_uint_ne(ferry__fb_builder_size(&b), n);
	sample(t, 42);
	ftest_assert_ok(t->build(&b, space.value));
	ftest_assert_uint_eq(ferry__fb_builder_size(&b), n);
	ftest_assert_mem_eq(ferry__fb_builder_data(&b), first, n);
	free(first);
	ferry__fb_builder_fini(&b);
}

static char last_log[512];

static void capture(void *arg, enum ferry_log_level level, const char *component,
		    const char *message)
{
	(void)arg;
	(void)level;
	snprintf(last_log, sizeof(last_log), "%s: %s", component, message);
}

FTEST(missing_required_field_is_einval_and_logged)
{
	struct wt_scalars sc = {0};
	struct wt_everything e = {.scalars = &sc};
	struct ferry__fb_builder b = {0};

	ferry_log_set_handler(capture, NULL);
	ftest_assert_errno(wt_everything_build(&b, &e), -EINVAL);
	ftest_assert_true(strstr(last_log, "Everything.label") != NULL);
	ftest_assert_ptr_null(ferry__fb_builder_data(&b));
	ftest_assert_uint_eq(ferry__fb_builder_size(&b), 0);
	e.label = "x";
	e.scalars = NULL;
	ftest_assert_errno(wt_everything_build(&b, &e), -EINVAL);
	e.scalars = &sc;
	ftest_assert_ok(wt_everything_build(&b, &e));
	ftest_assert_ptr_notnull(ferry__fb_builder_data(&b));
	ferry_log_set_handler(NULL, NULL);
	ferry__fb_builder_fini(&b);
}

FTEST(inconsistent_vectors_are_einval)
{
	static const char *const tags[] = {"a", NULL};
	struct wt_scalars sc = {0};
	struct wt_everything e = {.scalars = &sc, .label = "x", .u32s_count = 3};
	struct ferry__fb_builder b = {0};

	ftest_assert_errno(wt_everything_build(&b, &e), -EINVAL);
	e.u32s_count = 0;
	e.tags = tags;
	e.tags_count = 2;
	ftest_assert_errno(wt_everything_build(&b, &e), -EINVAL);
	e.tags_count = 1;
	ftest_assert_ok(wt_everything_build(&b, &e));
	ferry__fb_builder_fini(&b);
}

FTEST(vector_larger_than_the_format_is_e2big)
{
	static const uint8_t one = 1;
	struct wt_scalars sc = {0};
	struct wt_everything e = {
		.scalars = &sc, .label = "x", .raw = &one, .raw_count = (size_t)UINT32_MAX + 1};
	struct ferry__fb_builder b = {0};

	ftest_assert_errno(wt_everything_build(&b, &e), -E2BIG);
	e.raw_count = (size_t)FERRY_FB_MAX_SIZE + 1;
	ftest_assert_errno(wt_everything_build(&b, &e), -E2BIG);
	ferry__fb_builder_fini(&b);
}

FTEST(builder_refuses_nesting_the_verifier_would_refuse)
{
	static struct wt_node chain[FERRY_FB_MAX_DEPTH + 1];
	struct ferry__fb_builder b = {0};
	struct wt_node self = {.value = 1};

	for (int i = 0; i < FERRY_FB_MAX_DEPTH; i++)
		chain[i].child = &chain[i + 1];
	/* chain[0] .. chain[64]: 65 levels */
	ftest_assert_errno(wt_node_build(&b, &chain[0]), -EINVAL);
	/* chain[1] .. chain[64]: exactly the limit */
	ftest_assert_ok(wt_node_build(&b, &chain[1]));
	ftest_assert_ok(wt_node_verify(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	/* a cycle in the caller's structs ends at the limit instead of recursing forever */
	self.child = &self;
	ftest_assert_errno(wt_node_build(&b, &self), -EINVAL);
	ferry__fb_builder_fini(&b);
}

FTEST(tables_without_live_fields_build_and_read)
{
	struct wt_empty none = {0};
	struct wt_retired gone = {0};
	struct ferry__fb_builder b = {0};

	ftest_assert_ok(wt_empty_build(&b, &none));
	ftest_assert_ok(wt_empty_verify(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	ftest_assert_ok(wt_retired_build(&b, &gone));
	ftest_assert_ok(wt_retired_verify(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	ferry__fb_builder_fini(&b);
}

FTEST(unknown_fields_are_ignored_for_forward_compatibility)
{
	const struct wt_test_table *t = wt_test_table_find("Everything");
	struct ferry__fb_builder b = {0};

	sample(t, 7);
	ftest_assert_ok(t->build(&b, space.value));
	/* A reader that knows fewer fields (here: none) accepts a newer writer's table. */
	ftest_assert_ok(wt_empty_verify(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	ferry__fb_builder_fini(&b);
}

/* Build @t's sample under an allocation failure at n = 0, 1, ... until it succeeds. */
static void build_under_oom(const struct wt_test_table *t, int *failures)
{
	for (long n = 0;; n++) {
		struct ferry__fb_builder b;
		int ret;

		ferry__fb_builder_init(&b);
		ferry__alloc_fail_after(n);
		ret = t->build(&b, space.value);
		ferry__alloc_fail_after(-1);
		if (ret == -ENOMEM) {
			ftest_assert_ptr_null(ferry__fb_builder_data(&b));
			ferry__fb_builder_fini(&b);
			(*failures)++;
			continue;
		}
		ftest_assert_ok(ret);
		ftest_assert_ptr_null(t->check(ferry__fb_builder_data(&b), space.value));
		ferry__fb_builder_fini(&b);
		return;
	}
}

FTEST(oom_at_every_builder_allocation_fails_cleanly)
{
	static const char *tags[3000];
	struct wt_scalars sc = {0};
	struct wt_everything e = {.scalars = &sc, .label = "x", .tags = tags, .tags_count = 3000};
	const struct wt_test_table *t = wt_test_table_find("Everything");
	int failures = 0;

	for (size_t i = 0; i < wt_test_table_count; i++) {
		for (uint32_t seed = 0; seed < 20; seed++) {
			sample(&wt_test_tables[i], seed);
			build_under_oom(&wt_test_tables[i], &failures);
		}
	}
	/* A message of many parts grows the buffer several times: each growth can fail. */
	for (int i = 0; i < 3000; i++)
		tags[i] = "a string of some length, appended three thousand times";
	memcpy(space.value, &e, sizeof(e));
	failures = 0;
	build_under_oom(t, &failures);
	ftest_assert_int_ge(failures, 5);
}
