/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loop timers: an intrusive pairing heap ordered by (deadline, start sequence). Start and stop
 * are O(1) and O(log n) amortised and never allocate, so thousands of per-connection timers cost
 * nothing at rest; the loop sleeps in io_uring_enter until the root's deadline.
 */
#include <errno.h>

#include "common/loop_int.h"
#include "common/util.h"

static bool before(const struct ferry__loop_timer *a, const struct ferry__loop_timer *b)
{
	return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

/* Meld two detached heaps (roots with no sibling or parent). */
static struct ferry__loop_timer *meld(struct ferry__loop_timer *a, struct ferry__loop_timer *b)
{
	struct ferry__loop_timer *tmp;

	if (!a)
		return b;
	if (!b)
		return a;
	if (before(b, a)) {
		tmp = a;
		a = b;
		b = tmp;
	}
	b->prev = a;
	b->sibling = a->child;
	if (a->child)
		a->child->prev = b;
	a->child = b;
	return a;
}

/* The two-pass pairing of a sibling list (the children of a removed node) into one heap. */
static struct ferry__loop_timer *merge_pairs(struct ferry__loop_timer *first)
{
	struct ferry__loop_timer *pairs = NULL, *root = NULL, *a, *b, *next, *m;

	while (first) {
		a = first;
		b = a->sibling;
		next = b ? b->sibling : NULL;
		a->sibling = a->prev = NULL;
		if (b)
			b->sibling = b->prev = NULL;
		m = meld(a, b);
		m->sibling = pairs;
		pairs = m;
		first = next;
	}
	while (pairs) {
		next = pairs->sibling;
		pairs->sibling = NULL;
		root = meld(root, pairs);
		pairs = next;
	}
	return root;
}

static void heap_insert(struct ferry__loop *loop, struct ferry__loop_timer *t)
{
	t->child = t->sibling = t->prev = NULL;
	loop->timers = meld(loop->timers, t);
}

static void heap_remove(struct ferry__loop *loop, struct ferry__loop_timer *t)
{
	struct ferry__loop_timer *sub = merge_pairs(t->child);

	if (t == loop->timers) {
		loop->timers = sub;
	} else {
		/* prev is the parent when t is its first child, else the previous sibling. */
		if (t->prev->child == t)
			t->prev->child = t->sibling;
		else
			t->prev->sibling = t->sibling;
		if (t->sibling)
			t->sibling->prev = t->prev;
		loop->timers = meld(loop->timers, sub);
	}
	t->child = t->sibling = t->prev = NULL;
}

uint64_t ferry__loop_now_ms(void)
{
	return ferry__now_ms();
}

/* @now + @ms, saturating: a huge timeout means "never" rather than wrapping into the past. */
static uint64_t deadline(uint64_t now, uint64_t ms)
{
	if (ms > (UINT64_MAX - now) / 1000000u)
		return UINT64_MAX;
	return now + ms * 1000000u;
}

int ferry__loop_timer_start(struct ferry__loop *loop, struct ferry__loop_timer *timer,
			    uint64_t timeout_ms, uint64_t repeat_ms, ferry__loop_timer_cb cb)
{
	if (loop->destroying)
		return -ECANCELED;
	if (timer->active)
		heap_remove(timer->loop, timer);
	timer->loop = loop;
	timer->cb = cb;
	timer->repeat_ms = repeat_ms;
	timer->due_ns = deadline(ferry__now_ns(), timeout_ms);
	timer->seq = loop->timer_seq++;
	timer->active = true;
	heap_insert(loop, timer);
	return 0;
}

int ferry__loop_timer_stop(struct ferry__loop_timer *timer)
{
	if (!timer->active)
		return -ENOENT;
	heap_remove(timer->loop, timer);
	timer->active = false;
	return 0;
}

/*
 * Fire every timer due now, earliest first. Timers (re)started by a callback of this pass get a
 * sequence number >= limit and wait for the next pass, so a 0 ms repeating timer cannot starve
 * the rings.
 */
void ferry__loop_timers_run(struct ferry__loop *loop)
{
	uint64_t now = ferry__now_ns(), limit = loop->timer_seq;
	struct ferry__loop_timer *t;

	while ((t = loop->timers) && t->due_ns <= now && t->seq < limit) {
		heap_remove(loop, t);
		if (t->repeat_ms) {
			/* Next period counted from now: a stalled loop does not fire a burst. */
			t->due_ns = deadline(now, t->repeat_ms);
			t->seq = loop->timer_seq++;
			heap_insert(loop, t);
		} else {
			t->active = false;
		}
		t->cb(t, 0);
	}
}

uint64_t ferry__loop_timers_wait_ns(struct ferry__loop *loop)
{
	uint64_t now;

	if (!loop->timers)
		return UINT64_MAX;
	now = ferry__now_ns();
	return loop->timers->due_ns <= now ? 0 : loop->timers->due_ns - now;
}

void ferry__loop_timers_cancel_all(struct ferry__loop *loop)
{
	struct ferry__loop_timer *t;

	while ((t = loop->timers)) {
		heap_remove(loop, t);
		t->active = false;
		t->cb(t, -ECANCELED);
	}
}
