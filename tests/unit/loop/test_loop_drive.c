/* SPDX-License-Identifier: Apache-2.0 */
/* Drivers (ferry__loop_drive): a waiting thread runs the loop's passes itself while the loop
 * thread parks; what needs a submission goes back to the loop thread; refusals. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/loop.h"
#include "common/util.h"
#include "ftest.h"

#define SECOND_NS 1000000000ull

static void *loop_main(void *arg)
{
	ftest_assert_ok(ferry__loop_run(arg));
	return NULL;
}

static struct ferry__loop *spinning_loop(unsigned spin_us)
{
	struct ferry__loop_opts opts = {.spin_us = spin_us};
	struct ferry__loop *loop = NULL;

	ftest_assert_ok(ferry__loop_create(&opts, &loop));
	return loop;
}

struct job {
	atomic_int ran;	  /* the post ran */
	pthread_t thread; /* where */
};

static void on_job(void *arg, int status)
{
	struct job *j = arg;

	ftest_assert_int_eq(status, 0);
	j->thread = pthread_self();
	atomic_store(&j->ran, 1);
}

static bool job_ran(void *arg)
{
	return atomic_load(&((struct job *)arg)->ran) != 0;
}

/* A thread running @loop, returned once the loop runs (a driver before that gets -EBUSY). */
static pthread_t start_loop(struct ferry__loop *loop)
{
	struct job j = {0};
	pthread_t t;

	ftest_assert_ok(ferry__loop_post(loop, on_job, &j));
	ftest_assert_int_eq(pthread_create(&t, NULL, loop_main, loop), 0);
	while (!job_ran(&j))
		sched_yield();
	return t;
}

/* Posts made by a waiter run on the waiter while it drives, for a spinning loop and for one
 * that sleeps (the driver's wake-up makes it park); one after another, many times. */
FTEST(driver_runs_the_loop_on_its_own_thread)
{
	static const unsigned spins[] = {200, 0};

	for (size_t s = 0; s < FERRY_ARRAY_SIZE(spins); s++) {
		struct ferry__loop *loop = spinning_loop(spins[s]);
		pthread_t t = start_loop(loop);
		int on_me = 0;

		for (int i = 0; i < 2000; i++) {
			struct job j = {0};

			ftest_assert_ok(ferry__loop_post(loop, on_job, &j));
			ftest_assert_int_eq(ferry__loop_drive(loop, job_ran, &j,
							      ferry__now_ns() + 5 * SECOND_NS),
					    1);
			ftest_assert_true(job_ran(&j));
			on_me += pthread_equal(j.thread, pthread_self()) != 0;
		}
		/* The loop thread may run a post before the driver takes the loop: a sleeping
		 * one, woken by the post, often does (2-99% ran on the driver here); a spinning
		 * one parks for the driver (89-99%). */
		ftest_log("spin %u us: %d of 2000 posts ran on the driver", spins[s], on_me);
		if (spins[s])
			ftest_assert_int_gt(on_me, 0);
		/* The parked loop thread's choice (loop.h) is measured: each drive reports the
		 * side the loop thread parked on. Which sides 2000 drives meet depends on the
		 * scheduler (on a loaded machine the loop thread may never be caught yielding), so
		 * the test asks for a figure, not for both. */
		ftest_log("drives with the loop thread yielding %.1f us, asleep %.1f us",
			  (double)ferry__spin_avg(FERRY__SPIN_PARK, true) / 1e3,
			  (double)ferry__spin_avg(FERRY__SPIN_PARK, false) / 1e3);
		ftest_assert_uint_gt(ferry__spin_avg(FERRY__SPIN_PARK, true) +
					     ferry__spin_avg(FERRY__SPIN_PARK, false),
				     0);
		ferry__loop_stop(loop);
		pthread_join(t, NULL);
		ferry__loop_destroy(loop);
	}
}

/* A receive armed by a driver's pass needs io_uring_enter, which only the loop thread makes:
 * the driver hands the loop back, the loop thread submits, and the completion (which io_uring
 * runs in the submitting thread) reaches the callback. */
struct rx {
	struct ferry__loop *loop;
	struct ferry__loop_req req;
	int fd;
	char buf[8];
	atomic_int result; /* INT32_MIN until the callback */
	pthread_t armed_on;
};

static void on_rx(struct ferry__loop_req *req, int result)
{
	struct rx *r = req->data;

	atomic_store(&r->result, result);
}

static void arm_rx(void *arg, int status)
{
	struct rx *r = arg;

	ftest_assert_int_eq(status, 0);
	r->armed_on = pthread_self();
	r->req.data = r;
	ftest_assert_ok(ferry__loop_recv(r->loop, &r->req, r->fd, r->buf, 5, MSG_WAITALL, on_rx));
}

static bool rx_done(void *arg)
{
	return atomic_load(&((struct rx *)arg)->result) != INT32_MIN;
}

FTEST(driver_hands_submissions_to_the_loop_thread)
{
	struct rx r = {.loop = spinning_loop(200)};
	pthread_t t = start_loop(r.loop);
	int on_me = 0;
	int sv[2];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	r.fd = sv[0];
	for (int i = 0; i < 200; i++) {
		atomic_store(&r.result, INT32_MIN);
		memset(r.buf, 0, sizeof(r.buf));
		struct job j = {0};

		ftest_assert_int_eq((int)write(sv[1], "hello", 5), 5);
		/* A drive first, so that the loop thread is most likely parked when arm_rx is
		 * posted and the driver runs it. */
		ftest_assert_ok(ferry__loop_post(r.loop, on_job, &j));
		ftest_assert_int_eq(
			ferry__loop_drive(r.loop, job_ran, &j, ferry__now_ns() + 5 * SECOND_NS), 1);
		ftest_assert_ok(ferry__loop_post(r.loop, arm_rx, &r));
		ftest_assert_int_eq(
			ferry__loop_drive(r.loop, rx_done, &r, ferry__now_ns() + 5 * SECOND_NS), 1);
		ftest_assert_int_eq(atomic_load(&r.result), 5);
		ftest_assert_int_eq(memcmp(r.buf, "hello", 5), 0);
		on_me += pthread_equal(r.armed_on, pthread_self()) != 0;
	}
	/* Armed by the driver's pass, then submitted by the loop thread. */
	ftest_log("%d of 200 receives armed on the driver", on_me);
	ftest_assert_int_gt(on_me, 0);
	ferry__loop_stop(r.loop);
	pthread_join(t, NULL);
	ferry__loop_destroy(r.loop);
	close(sv[0]);
	close(sv[1]);
}

struct nested {
	struct ferry__loop *loop;
	atomic_int ret; /* the inner drive's result, or 1 until it ran */
};

static bool never(void *arg)
{
	(void)arg;
	return false;
}

static void drive_inside(void *arg, int status)
{
	struct nested *n = arg;

	ftest_assert_int_eq(status, 0);
	atomic_store(&n->ret,
		     ferry__loop_drive(n->loop, never, NULL, ferry__now_ns() + 5 * SECOND_NS));
}

static bool nested_ran(void *arg)
{
	return atomic_load(&((struct nested *)arg)->ret) != 1;
}

/* Refused with -EBUSY: a loop that is not running, a single-issuer loop, and a callback that
 * drives while its thread already drives (it would wait inside a pass). A deadline passed with
 * nothing done gives 0. */
FTEST(driver_refusals_and_deadline)
{
	struct ferry__loop_opts si = {.flags = FERRY_LOOP_SINGLE_ISSUER};
	struct ferry__loop *loop = spinning_loop(200), *single = NULL;
	struct nested n = {.loop = loop};
	pthread_t t;

	atomic_init(&n.ret, 1);
	ftest_assert_errno(ferry__loop_drive(loop, never, NULL, ferry__now_ns() + SECOND_NS),
			   -EBUSY);
	ftest_assert_ok(ferry__loop_create(&si, &single));
	ftest_assert_errno(ferry__loop_drive(single, never, NULL, ferry__now_ns() + SECOND_NS),
			   -EBUSY);
	ferry__loop_destroy(single);

	t = start_loop(loop);
	ftest_assert_int_eq(ferry__loop_drive(loop, never, NULL, ferry__now_ns() + 2000000), 0);
	ftest_assert_ok(ferry__loop_post(loop, drive_inside, &n));
	ftest_assert_int_eq(
		ferry__loop_drive(loop, nested_ran, &n, ferry__now_ns() + 5 * SECOND_NS), 1);
	/* Run by this thread's drive or by the loop thread: either already runs the loop's
	 * passes, so the inner drive is refused (never a second hold, never a wait). */
	ftest_log("inner drive: %d", atomic_load(&n.ret));
	ftest_assert_int_eq(atomic_load(&n.ret), -EBUSY);
	ferry__loop_stop(loop);
	pthread_join(t, NULL);
	ferry__loop_destroy(loop);
}

/* Several drivers and posting threads at once, with stop arriving in the middle: every post
 * runs exactly once, and stop ends the loop thread and the drivers. */
struct crowd {
	struct ferry__loop *loop;
	atomic_int posted, ran, cancelled;
	atomic_bool stopping;
};

static void on_crowd(void *arg, int status)
{
	struct crowd *c = arg;

	if (status == -ECANCELED) { /* by destroy */
		atomic_fetch_add(&c->cancelled, 1);
		return;
	}
	ftest_assert_int_eq(status, 0);
	atomic_fetch_add(&c->ran, 1);
}

static bool crowd_caught_up(void *arg)
{
	struct crowd *c = arg;

	return atomic_load(&c->ran) == atomic_load(&c->posted);
}

static void *crowd_main(void *arg)
{
	struct crowd *c = arg;

	for (int i = 0; i < 3000 && !atomic_load(&c->stopping); i++) {
		if (ferry__loop_post(c->loop, on_crowd, c) == 0)
			atomic_fetch_add(&c->posted, 1);
		(void)ferry__loop_drive(c->loop, crowd_caught_up, c,
					ferry__now_ns() + SECOND_NS / 10);
	}
	return NULL;
}

FTEST(drivers_posters_and_stop_race)
{
	struct crowd c = {.loop = spinning_loop(100)};
	pthread_t loop_thread = start_loop(c.loop), workers[3];

	for (int i = 0; i < 3; i++)
		ftest_assert_int_eq(pthread_create(&workers[i], NULL, crowd_main, &c), 0);
	usleep(20 * 1000);
	atomic_store(&c.stopping, true);
	ferry__loop_stop(c.loop);
	pthread_join(loop_thread, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(workers[i], NULL);
	/* Posts the loop did not run get -ECANCELED from destroy: none is lost or run twice. */
	ferry__loop_destroy(c.loop);
	ftest_log("%d posted: %d run, %d cancelled", atomic_load(&c.posted), atomic_load(&c.ran),
		  atomic_load(&c.cancelled));
	ftest_assert_int_gt(atomic_load(&c.ran), 0);
	ftest_assert_int_eq(atomic_load(&c.ran) + atomic_load(&c.cancelled),
			    atomic_load(&c.posted));
}
