/* SPDX-License-Identifier: Apache-2.0 */
/* The object manager's peer bookkeeping (transport/objmgr_peer.h) under a fake engine on a real
 * loop: peers by key, steps that wait for the connect, the status each failure gives the steps
 * (connect, close, go, drop, deadline), steps whose engine callback is still owed, and the
 * order of fail and close. */
#include "common/alloc.h"
#include "common/loop.h"
#include "common/util.h"
#include "ftest.h"
#include "ftest_loop.h"
#include "transport/objmgr_peer.h"

struct fake_peer {
	uint64_t engine_state;		/* before base: the layer must use peer_offset */
	struct ferry__objmgr_peer base; /* the layer's part */
};

struct fake_step {
	struct ferry__objmgr_step base; /* the layer's part */
	int go_ret;			/* what go returns */
	bool owed;			/* an engine callback is owed: fail only records */
	unsigned gos;			/* ops->go calls */
	unsigned fails;			/* ops->fail calls */
	int fail_status;		/* the first fail's */
	bool done;			/* handed back */
	int status;			/* with it */
};

static unsigned fails_total, closes, fails_at_close, kicks;
static int next_connect_ret;

static struct fake_step *step_of(struct ferry__objmgr_step *s)
{
	return FERRY_CONTAINER_OF(s, struct fake_step, base);
}

static void step_finish(struct fake_step *f, int status)
{
	ferry__objmgr_step_end(&f->base);
	ftest_assert_false(f->done);
	f->done = true;
	f->status = status;
}

static int fake_connect(struct ferry__objmgr_peer *peer, const char *ip, uint16_t port)
{
	struct fake_peer *p = FERRY_CONTAINER_OF(peer, struct fake_peer, base);

	ftest_assert_str_eq(ip, "10.0.0.1");
	ftest_assert_uint_eq(port, 7);
	ftest_assert_false(peer->up);
	ftest_assert_ptr_null(peer->steps);
	ftest_assert_uint_eq(p->engine_state, 0);
	p->engine_state = 1;
	return next_connect_ret;
}

static void fake_close(struct ferry__objmgr_peer *peer)
{
	struct fake_peer *p = FERRY_CONTAINER_OF(peer, struct fake_peer, base);

	ftest_assert_ptr_null(peer->steps);
	ftest_assert_ptr_null(ferry__objmgr_peer_find(peer->set, peer->key));
	ftest_assert_uint_eq(p->engine_state, 1);
	closes++;
	fails_at_close = fails_total;
}

static int fake_go(struct ferry__objmgr_step *s)
{
	struct fake_step *f = step_of(s);

	ftest_assert_true(s->peer->up);
	ftest_assert_true(s->started);
	f->gos++;
	return f->go_ret;
}

static void fake_fail(struct ferry__objmgr_step *s, int status)
{
	struct fake_step *f = step_of(s);

	fails_total++;
	if (f->fails++ == 0)
		f->fail_status = status;
	if (!f->owed)
		step_finish(f, status);
}

static void fake_kick(struct ferry__objmgr_peer_set *set)
{
	(void)set;
	kicks++;
}

static const struct ferry__objmgr_peer_ops fake_ops = {
	.peer_size = sizeof(struct fake_peer),
	.peer_offset = offsetof(struct fake_peer, base),
	.name = "FAKE ",
	.over = "over FAKE ",
	.connect_error = -EHOSTUNREACH,
	.connect = fake_connect,
	.close = fake_close,
	.go = fake_go,
	.fail = fake_fail,
	.kick = fake_kick,
};

struct env {
	struct ferry__loop *loop;
	struct ferry__objmgr_peer_set set;
};

static void env_init(struct env *e, unsigned timeout_ms)
{
	fails_total = closes = fails_at_close = kicks = 0;
	next_connect_ret = 0;
	ftest_assert_ok(ferry__loop_create(NULL, &e->loop));
	ferry__objmgr_peer_set_init(&e->set, &fake_ops, e->loop, timeout_ms);
}

static void env_fini(struct env *e)
{
	ferry__objmgr_peer_drop_all(&e->set, -ECANCELED);
	ferry__loop_destroy(e->loop);
}

static struct ferry__objmgr_peer *get(struct env *e, const char *key)
{
	struct ferry__objmgr_peer *peer = NULL;

	ftest_assert_ok(ferry__objmgr_peer_get(&e->set, key, "10.0.0.1", 7, &peer));
	ftest_assert_ptr_notnull(peer);
	return peer;
}

static void attach(struct fake_step *f, struct ferry__objmgr_peer *peer)
{
	ferry__objmgr_step_attach(&f->base, peer, "10.0.0.1", 7);
}

/* A fresh set with steps of @timeout_ms, and its peer "p", connected when @up. */
static struct ferry__objmgr_peer *env_peer(struct env *e, unsigned timeout_ms, bool up)
{
	struct ferry__objmgr_peer *peer;

	env_init(e, timeout_ms);
	peer = get(e, "p");
	if (up)
		ferry__objmgr_peer_connected(peer, 0);
	return peer;
}

FTEST(peers_are_found_by_key_and_made_once)
{
	struct ferry__objmgr_peer *a, *b, *out = NULL;
	struct env e;

	env_init(&e, 10000);
	a = get(&e, "10.0.0.1:7");
	ftest_assert_ptr_eq(get(&e, "10.0.0.1:7"), a);
	b = get(&e, "10.0.0.1:7#1");
	ftest_assert_true(a != b);
	ftest_assert_ptr_eq(ferry__objmgr_peer_find(&e.set, "10.0.0.1:7#1"), b);
	ftest_assert_str_eq(b->key, "10.0.0.1:7#1");
	ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "10.0.0.1:8"));
	/* A connect that fails: nothing listed, nothing leaked. */
	next_connect_ret = -ENETUNREACH;
	ftest_assert_errno(ferry__objmgr_peer_get(&e.set, "10.0.0.1:9", "10.0.0.1", 7, &out),
			   -ENETUNREACH);
	ftest_assert_ptr_null(out);
	ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "10.0.0.1:9"));
	env_fini(&e);
	ftest_assert_uint_eq(closes, 2); /* a and b; never the one that did not connect */
}

/* Steps made before the connect wait, and start at it; later ones start at once. */
FTEST(steps_wait_for_the_connect)
{
	struct fake_step s1 = {0}, s2 = {0}, s3 = {0};
	struct ferry__objmgr_peer *peer;
	struct env e;

	peer = env_peer(&e, 10000, false);
	attach(&s1, peer);
	attach(&s2, peer);
	ftest_assert_uint_eq(s1.gos + s2.gos, 0);
	ftest_assert_true(ferry__loop_timer_active(&s1.base.deadline));
	ferry__objmgr_peer_connected(peer, 0);
	ftest_assert_uint_eq(s1.gos, 1);
	ftest_assert_uint_eq(s2.gos, 1);
	attach(&s3, peer);
	ftest_assert_uint_eq(s3.gos, 1);
	/* A second connect (cannot happen) starts nothing twice. */
	ferry__objmgr_peer_connected(peer, 0);
	ftest_assert_uint_eq(s1.gos + s2.gos + s3.gos, 3);
	step_finish(&s1, 0);
	ftest_assert_ptr_null(s1.base.peer);
	ftest_assert_false(ferry__loop_timer_active(&s1.base.deadline));
	env_fini(&e);
	ftest_assert_errno(s2.status, -ECANCELED);
	ftest_assert_errno(s3.status, -ECANCELED);
}

/* A go that fails fails its step with that error; the peer and its other steps stay. */
FTEST(a_go_error_fails_its_step_alone)
{
	struct fake_step bad = {.go_ret = -ENOMEM}, good = {0};
	struct ferry__objmgr_peer *peer;
	struct env e;

	peer = env_peer(&e, 10000, false);
	attach(&bad, peer);
	attach(&good, peer);
	ferry__objmgr_peer_connected(peer, 0);
	ftest_assert_true(bad.done);
	ftest_assert_errno(bad.status, -ENOMEM);
	ftest_assert_false(good.done);
	ftest_assert_ptr_eq(peer->steps, &good.base);
	bad = (struct fake_step){.go_ret = -EIO};
	attach(&bad, peer); /* up: at once */
	ftest_assert_errno(bad.status, -EIO);
	env_fini(&e);
}

/* A failed connect: -ETIMEDOUT stays, anything else becomes the engine's connect_error. */
FTEST(a_failed_connect_fails_every_step)
{
	static const int reasons[][2] = {
		{-ETIMEDOUT, -ETIMEDOUT}, {-ECONNREFUSED, -EHOSTUNREACH}, {-EACCES, -EHOSTUNREACH}};

	for (unsigned i = 0; i < FERRY_ARRAY_SIZE(reasons); i++) {
		struct fake_step s1 = {0}, s2 = {0};
		struct ferry__objmgr_peer *peer;
		struct env e;

		peer = env_peer(&e, 10000, false);
		attach(&s1, peer);
		attach(&s2, peer);
		ferry__objmgr_peer_connected(peer, reasons[i][0]);
		ftest_assert_uint_eq(s1.gos + s2.gos, 0);
		ftest_assert_errno(s1.status, reasons[i][1]);
		ftest_assert_errno(s2.status, reasons[i][1]);
		ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "p"));
		env_fini(&e);
	}
}

/* The engine closed the endpoint: -ETIMEDOUT stays, anything else is -ECONNRESET. */
FTEST(a_closed_endpoint_fails_every_step)
{
	static const int reasons[][2] = {
		{-ETIMEDOUT, -ETIMEDOUT}, {-EPIPE, -ECONNRESET}, {-ECANCELED, -ECONNRESET}};

	for (unsigned i = 0; i < FERRY_ARRAY_SIZE(reasons); i++) {
		struct fake_step s = {0};
		struct ferry__objmgr_peer *peer;
		struct env e;

		peer = env_peer(&e, 10000, true);
		attach(&s, peer);
		ferry__objmgr_peer_closed(peer, reasons[i][0]);
		ftest_assert_errno(s.status, reasons[i][1]);
		ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "p"));
		env_fini(&e);
	}
}

/* Drop: every step failed (an owed one detached, to finish later) before close. */
FTEST(drop_fails_steps_then_closes)
{
	struct fake_step plain = {0}, owed = {.owed = true};
	struct ferry__objmgr_peer *peer;
	struct env e;

	peer = env_peer(&e, 10000, true);
	attach(&plain, peer);
	attach(&owed, peer);
	ferry__objmgr_peer_drop(peer, -EPROTO);
	ftest_assert_uint_eq(closes, 1);
	ftest_assert_uint_eq(fails_at_close, 2);
	ftest_assert_errno(plain.status, -EPROTO);
	ftest_assert_uint_eq(owed.fails, 1);
	ftest_assert_errno(owed.fail_status, -EPROTO);
	ftest_assert_false(owed.done);
	ftest_assert_ptr_null(owed.base.peer);
	ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "p"));
	/* Its engine callback comes later. */
	step_finish(&owed, owed.fail_status);
	env_fini(&e);
}

static bool step_done(void *arg)
{
	return ((struct fake_step *)arg)->done;
}

/* A deadline drops the step's peer: its other steps fail with -ETIMEDOUT too, their own
 * deadlines stopped; the engine is kicked after. */
FTEST(a_deadline_drops_the_peer)
{
	struct fake_step first = {0}, second = {0}, later = {0};
	struct ferry__objmgr_peer *peer;
	struct env e;

	peer = env_peer(&e, 20, true);
	attach(&first, peer);
	attach(&second, peer);
	run_until(e.loop, step_done, &first);
	ftest_assert_errno(first.status, -ETIMEDOUT);
	ftest_assert_errno(second.status, -ETIMEDOUT);
	ftest_assert_false(ferry__loop_timer_active(&second.base.deadline));
	ftest_assert_uint_eq(closes, 1);
	ftest_assert_uint_eq(kicks, 1);
	ftest_assert_ptr_null(ferry__objmgr_peer_find(&e.set, "p"));
	/* A step that waits for a connect that never comes times out as well. */
	attach(&later, get(&e, "p"));
	ftest_assert_uint_eq(later.gos, 0);
	run_until(e.loop, step_done, &later);
	ftest_assert_errno(later.status, -ETIMEDOUT);
	ftest_assert_uint_eq(kicks, 2);
	env_fini(&e);
}

static bool step_failed(void *arg)
{
	return ((struct fake_step *)arg)->fails > 0;
}

/* A detached step whose engine callback is still owed: its deadline fails it alone (its peer
 * stays) and kicks the engine; the callback finishes it later. */
FTEST(a_deadline_of_a_detached_step_fails_it)
{
	struct fake_step owed = {.owed = true};
	struct ferry__objmgr_peer *peer;
	struct env e;

	peer = env_peer(&e, 20, true);
	attach(&owed, peer);
	ferry__objmgr_step_detach(&owed.base);
	ftest_assert_ptr_null(peer->steps);
	ftest_assert_ptr_null(owed.base.peer);
	ftest_assert_true(ferry__loop_timer_active(&owed.base.deadline));
	run_until(e.loop, step_failed, &owed);
	ftest_assert_errno(owed.fail_status, -ETIMEDOUT);
	ftest_assert_uint_eq(kicks, 1);
	ftest_assert_uint_eq(closes, 0);
	ftest_assert_ptr_eq(ferry__objmgr_peer_find(&e.set, "p"), peer);
	step_finish(&owed, owed.fail_status);
	env_fini(&e);
}
