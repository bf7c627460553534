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
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
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
	const struct ferry__conn *creator;     /* the owner's socket */
};

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

static int on_create(struct ferry__worker *w, const struct ferry__conn *conn,
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
	w->actor = a;
	FLOG_DEBUG(COMP, "worker %s: hosts an actor of class %s", w->id_hex, a->cls);
	return ret;
}

static int on_call(struct ferry__worker *w, struct ferry__wire_actor_call_view v)
{
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
	return ferry__worker_run_task(w, t, fn, &status);
}

static int on_kill(struct ferry__worker *w, struct ferry__wire_actor_kill_view v)
{
	struct ferry__wire_unique_id aid = ferry__wire_actor_kill_actor_id(v);
	struct ferry__wire_actor_kill_reply m = {.actor_id = aid};

	if (!w->actor || memcmp(w->actor->id.bytes, aid.bytes, sizeof(aid.bytes)) != 0) {
		m.status = -ESRCH;
		m.message = "no such actor on this worker";
	} else {
		destroy(w);
	}
	return ferry__wire_actor_kill_reply_build(&w->fb, &m);
}

int ferry__worker_actor_message(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type,
				const void *payload, size_t len, uint16_t *reply_type)
{
	(void)len;
	*reply_type = FERRY__WIRE_MSG_PUSH_TASK_REPLY;
	switch (type) {
	case FERRY__WIRE_MSG_ACTOR_CREATE:
		return on_create(w, conn, ferry__wire_actor_create_root_verified(payload));
	case FERRY__WIRE_MSG_ACTOR_CALL:
		return on_call(w, ferry__wire_actor_call_root_verified(payload));
	case FERRY__WIRE_MSG_ACTOR_KILL:
		*reply_type = FERRY__WIRE_MSG_ACTOR_KILL_REPLY;
		return on_kill(w, ferry__wire_actor_kill_root_verified(payload));
	default:
		return -EINVAL;
	}
}

void ferry__worker_actor_conn_closed(struct ferry__worker *w, const struct ferry__conn *conn)
{
	if (w->actor && w->actor->creator == conn)
		destroy(w);
}

void ferry__worker_actor_fini(struct ferry__worker *w)
{
	destroy(w);
}
