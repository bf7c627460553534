/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An actor in a worker: the class registry (ferry_register_actor_class, FERRY_ACTOR_CLASS),
 * ActorCreate (the constructor, run as a task with the class's name), ActorCall (a method, run
 * as a task of the function "Class.method" with the actor's state reachable from its ctx) and
 * ActorKill (the destructor). schema/runtime.fbs is the protocol.
 *
 * DESIGN
 * A worker hosts at most one actor: its owner keeps the worker's lease for the actor's life,
 * so the actor is the worker's only client of note. Methods run on the loop thread like every
 * task (worker_task.c), one at a time, each socket's in order. The actor belongs to the socket
 * that created it: when that socket closes (the owner killed it, returned the lease or died)
 * the actor is destroyed, so that a worker the node leases again never carries an old actor.
 * Concurrent calls (max_concurrency N > 1): the loop thread copies each ActorCall into the
 * pool's queue and N threads run them (each a task slot of worker_task.c with its own reply
 * builder); a finished call's reply goes to the loop thread through a post-queue
 * (common/postq.h), whose drain sends it. A socket that closes clears its calls' conn, so a
 * reply never meets a freed socket. The actor's end stops the pool first (its threads finish
 * their calls and are joined, replies of finished calls go out, queued ones are dropped: the
 * caller fails its calls in flight on the kill's reply or the socket's close), then the
 * destructor runs. The pool's
 * state is one static (one actor per worker), so a post that comes late finds it.
 * A detached actor does not end with its creator's socket: it stays until an ActorKill from
 * any socket; if its creator is gone by then, the worker exits after the kill (killed_detached).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/postq.h"
#include "common/util.h"
#include "common/wire.h"
#include "runtime/registry.h"
#include "runtime/worker.h"

#define COMP "worker"

struct ferry__worker_actor {
	struct ferry_actor_id id;	       /* its ID */
	char cls[FERRY_FUNCTION_NAME_MAX + 1]; /* its class */
	ferry_actor_fini_fn fini;	       /* the class's destructor, or NULL */
	void *state;			       /* what the constructor set */
	struct ferry__conn *creator;	       /* the owner's socket; NULL once closed */
	uint32_t max_concurrency;	       /* > 1: its calls run on the pool */
	bool detached;			       /* outlives its creator's socket */
};

/* ---- concurrent calls: the pool ---- */

/* The cap on max_concurrency: one task slot per thread (worker.h). */
#define POOL_MAX (FERRY__WORKER_TASK_SLOTS - 1)

struct call {
	struct call *next;		/* queue or done list */
	struct ferry__conn *conn;	/* where the reply goes; NULL once that socket closed */
	ferry_task_fn fn;		/* the method */
	uint8_t *reply;			/* the PushTaskReply, once run (ferry__malloc'd) */
	size_t reply_len;		/* its bytes */
	size_t len;			/* the ActorCall's bytes */
	_Alignas(16) uint8_t payload[]; /* the ActorCall frame, copied (verified on arrival) */
};

static struct {
	pthread_mutex_t lock;		  /* everything below */
	pthread_cond_t wake;		  /* a call was queued, or stop */
	struct ferry__worker *w;	  /* whose */
	pthread_t threads[POOL_MAX];	  /* nthreads of them */
	unsigned nthreads;		  /* running */
	bool stop;			  /* the actor ends: threads exit */
	struct call *queue, **queue_tail; /* not started, in arrival order */
	struct call *running[POOL_MAX];	  /* each thread's, or NULL */
	struct ferry__postq done;	  /* replies to send (pushed under lock) */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static void free_calls(struct call *c)
{
	while (c) {
		struct call *next = c->next;

		ferry__free(c->reply);
		ferry__free(c);
		c = next;
	}
}

/* Loop thread: send the finished calls' replies (@status < 0: the loop is going: drop them). */
static void flush(struct ferry__postq *q, void *done, int status)
{
	struct call *list = done;

	(void)q;
	for (struct call *c = list; c && status == 0; c = c->next) {
		int ret = -ENOMEM;

		if (!c->conn)
			continue;
		if (c->reply)
			ret = ferry__worker_owner_send(c->conn, FERRY__WIRE_MSG_PUSH_TASK_REPLY,
						       c->reply, c->reply_len);
		if (ret < 0 && ret != -ENOTCONN) {
			FLOG_ERROR(COMP, "cannot answer an actor call: %s: closing its socket",
				   ferry_strerror(ret));
			ferry__conn_close(c->conn); /* its close clears the others' conn */
		}
	}
	free_calls(list);
}

/* Pool thread, lock held: @c ran (its reply built into @fb, or not: -ENOMEM). */
static void call_done(struct call *c, struct ferry__fb_builder *fb, int ret)
{
	size_t n = ferry__fb_builder_size(fb);

	c->reply = ret == 0 ? ferry__malloc(n) : NULL;
	if (c->reply) {
		memcpy(c->reply, ferry__fb_builder_data(fb), n);
		c->reply_len = n;
	} /* else no reply: the flush closes the socket, or its caller would wait forever */
	/* Refused only once the loop's destroy began: pool_stop, before it, takes what is left. */
	(void)ferry__postq_push(&pool.done, c);
}

static void *pool_main(void *arg)
{
	unsigned slot = (unsigned)(uintptr_t)arg;
	struct ferry__fb_builder fb;

	ferry__fb_builder_init(&fb);
	ferry__worker_task_thread(slot + 1, &fb);
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		struct call *c = pool.queue;
		int status, ret;

		if (pool.stop)
			break;
		if (!c) {
			pthread_cond_wait(&pool.wake, &pool.lock);
			continue;
		}
		pool.queue = c->next;
		if (!pool.queue)
			pool.queue_tail = &pool.queue;
		pool.running[slot] = c;
		pthread_mutex_unlock(&pool.lock);
		ret = ferry__worker_run_task(
			pool.w,
			ferry__wire_actor_call_task(
				ferry__wire_actor_call_root_verified(c->payload)),
			c->fn, &status);
		pthread_mutex_lock(&pool.lock);
		pool.running[slot] = NULL;
		call_done(c, &fb, ret);
	}
	pthread_mutex_unlock(&pool.lock);
	ferry__fb_builder_fini(&fb);
	return NULL;
}

/* Start @n threads for the actor of @w. 0, or -errno with pool.nthreads started (0: its calls
 * run on the loop thread, in order). */
static int pool_start(struct ferry__worker *w, unsigned n)
{
	int ret = 0;

	pool.w = w;
	pool.stop = false;
	pool.queue_tail = &pool.queue;
	/* Once per process (one loop): a drain of an earlier actor may still be on its way. */
	if (!pool.done.loop)
		ferry__postq_init(&pool.done, w->loop, offsetof(struct call, next), flush);
	for (pool.nthreads = 0; pool.nthreads < n; pool.nthreads++) {
		ret = -pthread_create(&pool.threads[pool.nthreads], NULL, pool_main,
				      (void *)(uintptr_t)pool.nthreads);
		if (ret < 0)
			break;
	}
	return ret;
}

/* Loop thread: stop the threads (each ends its call first), send what finished, drop the
 * calls not started. */
static void pool_stop(void)
{
	struct call *queued;

	if (!pool.nthreads)
		return;
	pthread_mutex_lock(&pool.lock);
	pool.stop = true;
	pthread_cond_broadcast(&pool.wake);
	pthread_mutex_unlock(&pool.lock);
	for (unsigned i = 0; i < pool.nthreads; i++)
		pthread_join(pool.threads[i], NULL);
	pool.nthreads = 0;
	pthread_mutex_lock(&pool.lock);
	queued = pool.queue;
	pool.queue = NULL;
	pool.queue_tail = &pool.queue;
	pthread_mutex_unlock(&pool.lock);
	free_calls(queued);
	/* A drain already posted finds none. */
	flush(&pool.done, ferry__postq_take(&pool.done), pool.w->stopping ? -ECANCELED : 0);
}

/* Loop thread: queue ActorCall @payload for the pool. 1 (queued), or -ENOMEM. */
static int pool_queue(struct ferry__conn *conn, ferry_task_fn fn, const void *payload, size_t len)
{
	struct call *c = ferry__malloc(sizeof(*c) + len);

	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->conn = conn;
	c->fn = fn;
	c->len = len;
	memcpy(c->payload, payload, len);
	pthread_mutex_lock(&pool.lock);
	*pool.queue_tail = c;
	pool.queue_tail = &c->next;
	pthread_cond_signal(&pool.wake);
	pthread_mutex_unlock(&pool.lock);
	return 1;
}

/* Loop thread: @conn closed: its calls' replies go nowhere. The finished ones go out now to
 * the other sockets (what the drain would do); pushes are under the lock, so none slips by. */
static void pool_conn_closed(const struct ferry__conn *conn)
{
	struct call *lists[2];

	pthread_mutex_lock(&pool.lock);
	lists[0] = pool.queue;
	lists[1] = ferry__postq_take(&pool.done);
	for (int k = 0; k < 2; k++)
		for (struct call *c = lists[k]; c; c = c->next)
			if (c->conn == conn)
				c->conn = NULL;
	for (unsigned i = 0; i < pool.nthreads; i++)
		if (pool.running[i] && pool.running[i]->conn == conn)
			pool.running[i]->conn = NULL;
	pthread_mutex_unlock(&pool.lock);
	flush(&pool.done, lists[1], 0);
}

/* ---- the class registry ---- */

struct cls_key {
	char name[FERRY_FUNCTION_NAME_MAX + 1]; /* zero-padded */
};

struct cls_val {
	ferry_actor_init_fn init;
	ferry_actor_fini_fn fini;
};

static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry__hashmap cls_map;
static bool cls_ready;

int ferry_register_actor_class(const char *name, ferry_actor_init_fn init, ferry_actor_fini_fn fini)
{
	size_t len = name ? strnlen(name, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	struct cls_key k = {{0}};
	struct cls_val *slot = NULL;
	int ret;

	if (!init || !ferry__registry_name_valid(name, len) || memchr(name, '.', len)) {
		FLOG_ERROR(COMP, "cannot register actor class \"%.*s\": %s", (int)len,
			   name ? name : "", !init ? "no constructor" : "bad name");
		return -EINVAL;
	}
	memcpy(k.name, name, len);
	pthread_mutex_lock(&cls_lock);
	if (!cls_ready) {
		ferry__hashmap_init(&cls_map, sizeof(struct cls_key), sizeof(struct cls_val));
		cls_ready = true;
	}
	ret = ferry__hashmap_put(&cls_map, &k, (void **)&slot);
	if (ret > 0) {
		slot->init = init;
		slot->fini = fini;
		ret = 0;
	} else if (ret == 0) {
		ret = slot->init == init && slot->fini == fini ? 0 : -EEXIST;
	}
	pthread_mutex_unlock(&cls_lock);
	if (ret == -EEXIST)
		FLOG_ERROR(COMP, "actor class \"%s\" is registered twice, to two constructors",
			   k.name);
	else if (ret < 0)
		FLOG_ERROR(COMP, "cannot register actor class \"%s\": %s", k.name,
			   ferry_strerror(ret));
	return ret;
}

static bool cls_find(const char *name, size_t len, struct cls_val *out)
{
	struct cls_key k = {{0}};
	struct cls_val *v;

	if (!ferry__registry_name_valid(name, len))
		return false;
	memcpy(k.name, name, len);
	pthread_mutex_lock(&cls_lock);
	v = cls_ready ? ferry__hashmap_get(&cls_map, &k) : NULL;
	if (v)
		*out = *v;
	pthread_mutex_unlock(&cls_lock);
	return v != NULL;
}

void *ferry_actor_state(const struct ferry_task_ctx *ctx)
{
	struct ferry__worker *w = ferry__worker_of_task(ctx);

	return w && w->actor ? w->actor->state : NULL;
}

bool ferry__worker_actor_current(const struct ferry__worker *w, struct ferry_actor_id *id,
				 const char **cls)
{
	if (!w->actor)
		return false;
	*id = w->actor->id;
	*cls = w->actor->cls;
	return true;
}

/* ---- messages ---- */

bool ferry__worker_actor_is_message(uint16_t type)
{
	return type == FERRY__WIRE_MSG_ACTOR_CREATE || type == FERRY__WIRE_MSG_ACTOR_CALL ||
	       type == FERRY__WIRE_MSG_ACTOR_KILL;
}

static void destroy(struct ferry__worker *w)
{
	struct ferry__worker_actor *a = w->actor;

	if (!a)
		return;
	pool_stop(); /* its methods end before its state goes */
	w->actor = NULL;
	FLOG_DEBUG(COMP, "worker %s: actor of class %s ends", w->id_hex, a->cls);
	ferry__worker_graph_actor_gone(w); /* its graphs end with it */
	if (a->fini)
		a->fini(a->state);
	ferry__free(a);
}

/* The constructor, called by worker_task.c as the task's function: one task runs at a time
 * on this thread, so the class being constructed is a plain static. */
static struct cls_val constructing;
static void *constructed;

static int construct(struct ferry_task_ctx *ctx)
{
	constructed = NULL;
	return constructing.init(ctx, &constructed);
}

static int on_create(struct ferry__worker *w, struct ferry__conn *conn,
		     struct ferry__wire_actor_create_view v)
{
	struct ferry__wire_push_task_view t = ferry__wire_actor_create_task(v);
	struct ferry__wire_unique_id tid = ferry__wire_push_task_task_id(t);
	struct ferry__wire_unique_id aid = ferry__wire_actor_create_actor_id(v);
	const char *name = ferry__wire_push_task_function(t);
	uint32_t len = ferry__wire_push_task_function_len(t);
	struct ferry__worker_actor *a;
	char msg[400];
	int status, ret;

	if (w->actor) {
		snprintf(msg, sizeof(msg),
			 "worker %s on node %s already hosts an actor of class %s", w->id_hex,
			 w->node_hex, w->actor->cls);
		return ferry__worker_error_reply(w, &tid, -EBUSY, msg);
	}
	if (ferry_id_is_nil(aid.bytes, sizeof(aid.bytes)))
		return ferry__worker_error_reply(w, &tid, -EINVAL,
						 "malformed ActorCreate: no actor_id");
	if (ferry__wire_actor_create_max_concurrency(v) > POOL_MAX) {
		snprintf(msg, sizeof(msg), "max_concurrency %u is over the cap of %u",
			 (unsigned)ferry__wire_actor_create_max_concurrency(v), (unsigned)POOL_MAX);
		return ferry__worker_error_reply(w, &tid, -EINVAL, msg);
	}
	if (!cls_find(name, len, &constructing)) {
		snprintf(
			msg, sizeof(msg),
			"no actor class '%.*s' on node %s (worker %s): is it in the job's library?",
			(int)FERRY_MIN(len, 128u), name, w->node_hex, w->id_hex);
		return ferry__worker_error_reply(w, &tid, -ENOENT, msg);
	}
	a = ferry__calloc(1, sizeof(*a));
	if (!a)
		return ferry__worker_error_reply(w, &tid, -ENOMEM, "worker out of memory");
	ret = ferry__worker_run_task(w, t, construct, &status);
	if (status < 0) {
		ferry__free(a);
		return ret;
	}
	/* Built, even if its reply could not be (ret < 0): the socket then closes, and the
	 * actor goes with it (ferry__worker_actor_conn_closed). */
	memcpy(a->id.bytes, aid.bytes, sizeof(a->id.bytes));
	memcpy(a->cls, name, len);
	a->fini = constructing.fini;
	a->state = constructed;
	a->creator = conn;
	a->max_concurrency = ferry__wire_actor_create_max_concurrency(v);
	a->detached = ferry__wire_actor_create_detached(v);
	w->actor = a;
	FLOG_DEBUG(COMP, "worker %s: hosts an actor of class %s", w->id_hex, a->cls);
	/* No loop (the fuzz target): its calls run in order on this thread. */
	if (a->max_concurrency > 1 && w->loop) {
		int err = pool_start(w, a->max_concurrency);

		if (err < 0) /* it runs, with fewer threads than asked */
			FLOG_ERROR(COMP, "worker %s: %u of %u threads for the actor's calls: %s",
				   w->id_hex, pool.nthreads, a->max_concurrency,
				   ferry_strerror(err));
	}
	return ret;
}

static int on_call(struct ferry__worker *w, struct ferry__conn *conn, const void *payload,
		   size_t plen)
{
	struct ferry__wire_actor_call_view v = ferry__wire_actor_call_root_verified(payload);
	struct ferry__wire_push_task_view t = ferry__wire_actor_call_task(v);
	struct ferry__wire_unique_id tid = ferry__wire_push_task_task_id(t);
	struct ferry__wire_unique_id aid = ferry__wire_actor_call_actor_id(v);
	const char *name = ferry__wire_push_task_function(t);
	uint32_t len = ferry__wire_push_task_function_len(t);
	struct ferry__worker_actor *a = w->actor;
	size_t clen = a ? strlen(a->cls) : 0;
	ferry_task_fn fn;
	char msg[400];
	int status;

	if (!a || memcmp(a->id.bytes, aid.bytes, sizeof(aid.bytes)) != 0) {
		snprintf(msg, sizeof(msg), "the actor is not on worker %s (node %s) any more",
			 w->id_hex, w->node_hex);
		return ferry__worker_error_reply(w, &tid, -ESRCH, msg);
	}
	/* Only the actor's own class's methods: "Class." then the method. */
	fn = len > clen + 1 && !memcmp(name, a->cls, clen) && name[clen] == '.'
		     ? ferry__registry_find(name, len)
		     : NULL;
	if (!fn) {
		snprintf(msg, sizeof(msg),
			 "no method '%.*s' of actor class %s on node %s (worker %s): is it in the "
			 "job's library?",
			 (int)FERRY_MIN(len, 128u), name, a->cls, w->node_hex, w->id_hex);
		return ferry__worker_error_reply(w, &tid, -ENOENT, msg);
	}
	if (pool.nthreads)
		return pool_queue(conn, fn, payload, plen);
	return ferry__worker_run_task(w, t, fn, &status);
}

/* The creator's socket of a detached actor killed through another one: the worker exits when
 * it closes (loop thread). */
static const struct ferry__conn *exit_when_closed;

static void exit_worker(struct ferry__worker *w)
{
	exit_when_closed = NULL;
	if (!w->loop)
		return;
	FLOG_INFO(COMP, "worker %s: its detached actor was killed: exiting", w->id_hex);
	ferry__loop_stop(w->loop);
}

/* A detached actor killed through another socket than its creator's: the creator, if its
 * socket is open, hears of it (an ActorKillReply it did not ask for: it gives the lease
 * back). Nobody else holds the lease, so the worker exits once the creator's socket is gone
 * (at once if it is; a creator that just died may still look connected), and the node takes
 * its lease back whoever held it. */
static void killed_detached(struct ferry__worker *w, struct ferry__conn *creator,
			    const struct ferry__wire_actor_kill_reply *m)
{
	if (!creator) {
		exit_worker(w);
		return;
	}
	if (ferry__wire_actor_kill_reply_build(&w->fb, m) == 0)
		(void)ferry__worker_owner_send(creator, FERRY__WIRE_MSG_ACTOR_KILL_REPLY,
					       ferry__fb_builder_data(&w->fb),
					       ferry__fb_builder_size(&w->fb));
	exit_when_closed = creator;
}

static int on_kill(struct ferry__worker *w, struct ferry__conn *conn,
		   struct ferry__wire_actor_kill_view v)
{
	struct ferry__wire_unique_id aid = ferry__wire_actor_kill_actor_id(v);
	struct ferry__wire_actor_kill_reply m = {.actor_id = aid};
	struct ferry__conn *creator;
	bool detached;

	if (!w->actor || memcmp(w->actor->id.bytes, aid.bytes, sizeof(aid.bytes)) != 0) {
		m.status = -ESRCH;
		m.message = "no such actor on this worker";
	} else {
		creator = w->actor->creator;
		detached = w->actor->detached;
		destroy(w);
		if (detached && creator != conn)
			killed_detached(w, creator, &m);
	}
	return ferry__wire_actor_kill_reply_build(&w->fb, &m);
}

int ferry__worker_actor_message(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type,
				const void *payload, size_t len, uint16_t *reply_type)
{
	*reply_type = FERRY__WIRE_MSG_PUSH_TASK_REPLY;
	switch (type) {
	case FERRY__WIRE_MSG_ACTOR_CREATE:
		return on_create(w, conn, ferry__wire_actor_create_root_verified(payload));
	case FERRY__WIRE_MSG_ACTOR_CALL:
		return on_call(w, conn, payload, len);
	case FERRY__WIRE_MSG_ACTOR_KILL:
		*reply_type = FERRY__WIRE_MSG_ACTOR_KILL_REPLY;
		return on_kill(w, conn, ferry__wire_actor_kill_root_verified(payload));
	default:
		return -EINVAL;
	}
}

void ferry__worker_actor_conn_closed(struct ferry__worker *w, const struct ferry__conn *conn)
{
	pool_conn_closed(conn);
	if (conn && conn == exit_when_closed)
		exit_worker(w);
	if (!w->actor || w->actor->creator != conn)
		return;
	if (w->actor->detached)
		w->actor->creator = NULL; /* it stays: only a kill ends it */
	else
		destroy(w);
}

void ferry__worker_actor_fini(struct ferry__worker *w)
{
	destroy(w);
}
