/* SPDX-License-Identifier: Apache-2.0 */
/* Counters, histograms and the Prometheus text format (common/metrics.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/metrics.h"

struct ferry__metric_slot ferry__metric_slots[FERRY__METRIC_SLOTS];
_Thread_local int ferry__metric_my_slot;
static atomic_uint next_slot;

static const uint64_t bounds_us[FERRY__METRIC_BUCKETS - 1] = {
	10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000, 100000, 1000000, 10000000};

int ferry__metric_take_slot(void)
{
	ferry__metric_my_slot =
		1 + (int)(atomic_fetch_add_explicit(&next_slot, 1, memory_order_relaxed) %
			  FERRY__METRIC_SLOTS);
	return ferry__metric_my_slot;
}

void ferry__metric_observe_us(enum ferry__metric_hist_id id, uint64_t us)
{
#if FERRY_METRICS
	struct ferry__metric_slot *s = ferry__metric_slot();
	unsigned b = 0;

	while (b < FERRY__METRIC_BUCKETS - 1 && us > bounds_us[b])
		b++;
	atomic_fetch_add_explicit(&s->bucket[id][b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sum_us[id], us, memory_order_relaxed);
#else
	(void)id;
	(void)us;
#endif
}

void ferry__metric_printf(struct ferry__metric_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	for (;;) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? 2 * b->cap : 16384;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *more = ferry__realloc(b->data, cap);
		if (!more) {
			b->err = -ENOMEM;
			return;
		}
		b->data = more;
		b->cap = cap;
	}
}

void ferry__metric_put(struct ferry__metric_buf *b, const char *name, const char *type,
		       const char *help, double value)
{
	ferry__metric_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
			     name, value);
}

struct counter_def {
	unsigned group;
	const char *name, *labels, *help;
};

static const struct counter_def counters[FERRY__MC_COUNT] = {
#define FERRY__X(id, group, name, labels, help) {group, name, labels, help},
	FERRY__METRICS_COUNTERS(FERRY__X)
#undef FERRY__X
};

static const struct counter_def hists[FERRY__MH_COUNT] = {
#define FERRY__X(id, group, name, help) {group, name, "", help},
	FERRY__METRICS_HISTOGRAMS(FERRY__X)
#undef FERRY__X
};

static uint64_t counter_sum(int id)
{
	uint64_t v = 0;

	for (int s = 0; s < FERRY__METRIC_SLOTS; s++)
		v += atomic_load_explicit(&ferry__metric_slots[s].counter[id],
					  memory_order_relaxed);
	return v;
}

static void render_hist(struct ferry__metric_buf *b, int id)
{
	uint64_t cum = 0, sum_us = 0;

	ferry__metric_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", hists[id].name,
			     hists[id].help, hists[id].name);
	for (int k = 0; k < FERRY__METRIC_BUCKETS; k++) {
		for (int s = 0; s < FERRY__METRIC_SLOTS; s++)
			cum += atomic_load_explicit(&ferry__metric_slots[s].bucket[id][k],
						    memory_order_relaxed);
		if (k < FERRY__METRIC_BUCKETS - 1)
			ferry__metric_printf(b, "%s_bucket{le=\"%g\"} %llu\n", hists[id].name,
					     (double)bounds_us[k] / 1e6, (unsigned long long)cum);
		else
			ferry__metric_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", hists[id].name,
					     (unsigned long long)cum);
	}
	for (int s = 0; s < FERRY__METRIC_SLOTS; s++)
		sum_us += atomic_load_explicit(&ferry__metric_slots[s].sum_us[id],
					       memory_order_relaxed);
	ferry__metric_printf(b, "%s_sum %.9g\n%s_count %llu\n", hists[id].name,
			     (double)sum_us / 1e6, hists[id].name, (unsigned long long)cum);
}

void ferry__metrics_render(struct ferry__metric_buf *b, unsigned groups,
			   ferry__metric_collector collect, void *arg)
{
	for (int i = 0; i < FERRY__MC_COUNT; i++) {
		if (!(counters[i].group & groups))
			continue;
		/* A name's rows are listed together, its HELP and TYPE once, before the first. */
		if (!i || strcmp(counters[i].name, counters[i - 1].name))
			ferry__metric_printf(b, "# HELP %s %s\n# TYPE %s counter\n",
					     counters[i].name, counters[i].help, counters[i].name);
		if (*counters[i].labels)
			ferry__metric_printf(b, "%s{%s} %llu\n", counters[i].name,
					     counters[i].labels,
					     (unsigned long long)counter_sum(i));
		else
			ferry__metric_printf(b, "%s %llu\n", counters[i].name,
					     (unsigned long long)counter_sum(i));
	}
	for (int i = 0; i < FERRY__MH_COUNT; i++)
		if (hists[i].group & groups)
			render_hist(b, i);
	if (collect)
		collect(b, arg);
}
