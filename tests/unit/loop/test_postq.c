/* SPDX-License-Identifier: Apache-2.0 */
/* The post-queue (common/postq.h): items pushed by several threads reach the loop's thread each
 * exactly once, each thread's in the order it pushed them, in few drains; a kick with nothing
 * pushed still runs the callback; a take outside the drain leaves the drain posted harmless;
 * the loop's destroy hands a posted drain -ECANCELED. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "common/loop.h"
#include "common/postq.h"
#include "ftest.h"
#include "ftest_loop.h"

#define PRODUCERS 4
#define PER 20000

struct item {
	struct item *next;
	int producer, seq;
};

static struct item items[PRODUCERS][PER];
static int next_seq[PRODUCERS]; /* loop thread: the seq each producer's next item must have */
static int got, drains, empty_drains, cancelled, order_broken;
static pthread_t loop_thread;
static bool wrong_thread;

static void take(struct ferry__postq *q, void *list, int status)
{
	(void)q;
	drains++;
	if (!pthread_equal(pthread_self(), loop_thread))
		wrong_thread = true;
	if (status < 0)
		cancelled++;
	if (!list)
		empty_drains++;
	for (struct item *it = list; it; it = it->next) {
		if (it->seq != next_seq[it->producer])
			order_broken++;
		next_seq[it->producer] = it->seq + 1;
		got++;
	}
}

struct producer {
	struct ferry__postq *q;
	int index;
};

static void *produce(void *arg)
{
	struct producer *p = arg;

	for (int i = 0; i < PER; i++) {
		items[p->index][i] = (struct item){.producer = p->index, .seq = i};
		ftest_assert_ok(ferry__postq_push(p->q, &items[p->index][i]));
	}
	return NULL;
}

static bool all_got(void *arg)
{
	(void)arg;
	return got == PRODUCERS * PER;
}

static bool one_drain(void *arg)
{
	(void)arg;
	return drains > 0;
}

static struct ferry__loop *setup(struct ferry__postq *q)
{
	struct ferry__loop *loop = NULL;

	ftest_assert_ok(ferry__loop_create(NULL, &loop));
	ferry__postq_init(q, loop, offsetof(struct item, next), take);
	loop_thread = pthread_self();
	got = drains = empty_drains = cancelled = order_broken = 0;
	wrong_thread = false;
	for (int i = 0; i < PRODUCERS; i++)
		next_seq[i] = 0;
	return loop;
}

FTEST(items_from_many_threads_arrive_once_and_in_each_thread_s_order)
{
	struct ferry__postq q;
	struct ferry__loop *loop = setup(&q);
	struct producer p[PRODUCERS];
	pthread_t th[PRODUCERS];
	bool posted;

	for (int i = 0; i < PRODUCERS; i++) {
		p[i] = (struct producer){.q = &q, .index = i};
		ftest_assert_ok(pthread_create(&th[i], NULL, produce, &p[i]));
	}
	run_until(loop, all_got, NULL);
	for (int i = 0; i < PRODUCERS; i++)
		ftest_assert_ok(pthread_join(th[i], NULL));
	ftest_assert_int_eq(order_broken, 0);
	ftest_assert_int_eq(got, PRODUCERS * PER);
	ftest_assert_false(wrong_thread);
	ftest_assert_int_eq(cancelled, 0);
	ftest_assert_ptr_null(ferry__postq_take(&q)); /* nothing left behind */
	ftest_log("%d items in %d drains", got, drains);
	/* A push that raced with the last drain may have posted one more, which finds none. */
	posted = ferry__postq_posted(&q);
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(got, PRODUCERS * PER); /* nothing twice */
	ftest_assert_int_eq(cancelled, posted ? 1 : 0);
}

FTEST(a_kick_runs_the_callback_with_nothing)
{
	struct ferry__postq q;
	struct ferry__loop *loop = setup(&q);

	ftest_assert_ok(ferry__postq_kick(&q));
	ftest_assert_ok(ferry__postq_kick(&q)); /* coalesced with the first */
	run_until(loop, one_drain, NULL);
	ftest_assert_int_eq(drains, 1);
	ftest_assert_int_eq(empty_drains, 1);
	ftest_assert_false(ferry__postq_posted(&q));
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(drains, 1);
}

/* A take on the loop's thread (a shutdown) while the drain is posted: the drain runs later and
 * finds only what came after; the loop's destroy runs a drain still posted with -ECANCELED. */
FTEST(a_take_beside_a_posted_drain_and_destroy)
{
	struct ferry__postq q;
	struct ferry__loop *loop = setup(&q);
	struct item *list;

	items[0][0] = (struct item){.seq = 0};
	items[0][1] = (struct item){.seq = 1};
	ftest_assert_ok(ferry__postq_push(&q, &items[0][0]));
	ftest_assert_true(ferry__postq_posted(&q));
	list = ferry__postq_take(&q);
	ftest_assert_ptr_eq(list, &items[0][0]);
	ftest_assert_ptr_null(list->next);
	ftest_assert_ptr_null(ferry__postq_take(&q));
	ftest_assert_ok(ferry__postq_push(&q, &items[0][1])); /* the posted drain takes it */
	next_seq[0] = 1;
	run_until(loop, one_drain, NULL);
	ftest_assert_int_eq(got, 1);
	ftest_assert_int_eq(drains, 1);

	ftest_assert_ok(ferry__postq_kick(&q)); /* posted to a loop that will not run again */
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(cancelled, 1);
	ftest_assert_int_eq(drains, 2);
}
