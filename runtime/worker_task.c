/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A task in a worker: a PushTask decoded and checked, its ref arguments read from the store,
 * its function called with a ferry_task_ctx, its returns inline or sealed in the store, and
 * the PushTaskReply. Also the inside-a-task API of runtime.h (ferry_task_*) and the worker
 * setup registration (ferry_register_worker_setup), which the job's library calls.
 *
 * DESIGN
 * One task runs at a time on the worker's loop thread (worker.c calls ferry__worker_push_task
 * from the owner socket's on_message); an actor created with max_concurrency > 1 also runs
 * its calls on threads of its own (worker_actor.c), each a slot of the running table:
 * ferry_task_* accept only a context that table holds. A stale context (kept past its task),
 * NULL or garbage is -EINVAL, never dereferenced. The function may call ferry_task_* from
 * threads of its own while it runs: a per-task mutex guards the returns.
 * Returns above the task's inline limit are created in the store as the function sets them
 * (ferry_task_return copies in, ferry_task_return_alloc hands out the store's buffer) and
 * sealed only when it returned 0: a failed task leaves no object behind.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "runtime/registry.h"
#include "runtime/worker.h"

#define COMP "worker"
#define CTX_MESSAGE_MAX 1024
#define DEFAULT_ARG_TIMEOUT_MS 60000

struct task_arg {
	const void *data; /* inline bytes in the frame, or a store view's */
	size_t len;	  /* their size */
};

struct task_return {
	void *data;    /* inline: ours (ferry__malloc); in store: the create buffer */
	uint64_t len;  /* bytes */
	bool set;      /* set by the function (once) */
	bool in_store; /* created in the store, sealed after the function returned 0 */
	bool sealed;   /* in the store already (an earlier attempt sealed it); data is scratch */
};

struct ferry_task_ctx {
	struct ferry__worker *w;	 /* the worker running it */
	struct ferry_task_id task;	 /* its ID: return i is object (task, i + 1) */
	struct ferry_worker_id caller;	 /* owns the returns */
	uint64_t inline_max;		 /* returns above it go to the store */
	struct task_arg *args;		 /* nargs arguments */
	size_t nargs;			 /* their count */
	struct ferry_plasma_view *views; /* pins of the ref arguments */
	size_t nviews;			 /* their count */
	struct ferry_view *owner_views;	 /* nargs: those asked of their owner, or NULL */
	struct task_return *rets;	 /* nrets returns */
	size_t nrets;			 /* their count */
	pthread_mutex_t lock;		 /* the returns and the message */
	char message[CTX_MESSAGE_MAX];	 /* ferry_task_error's, or the worker's reason */
	bool has_message;		 /* message was set by the function */
};

/* The tasks whose functions are running: slot 0 the loop thread's, the others those of an
 * actor's concurrent calls (ferry__worker_task_thread). */
static struct ferry_task_ctx *_Atomic running[FERRY__WORKER_TASK_SLOTS];
static _Atomic unsigned nslots = 1;		      /* slots in use: 0 .. nslots - 1 */
static _Thread_local unsigned my_slot;		      /* this thread's; 0: the loop's */
static _Thread_local struct ferry__fb_builder *my_fb; /* its replies' builder; NULL: w->fb */

bool ferry__worker_task_running(void)
{
	unsigned n = atomic_load(&nslots);

	for (unsigned i = 0; i < n; i++)
		if (atomic_load(&running[i]))
			return true;
	return false;
}

void ferry__worker_task_thread(unsigned slot, struct ferry__fb_builder *fb)
{
	unsigned n = atomic_load(&nslots);

	my_slot = slot;
	my_fb = fb;
	while (n < slot + 1 && !atomic_compare_exchange_weak(&nslots, &n, slot + 1))
		;
}

static struct ferry__fb_builder *reply_fb(struct ferry__worker *w)
{
	return my_fb ? my_fb : &w->fb;
}

/* ---- worker setup registration ---- */

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_setup_fn setup_fn;			      /* the one registered */
static char setup_name[FERRY_FUNCTION_NAME_MAX + 1];  /* its name */
static char setup_other[FERRY_FUNCTION_NAME_MAX + 1]; /* a second one: a conflict */
static char setup_message[CTX_MESSAGE_MAX];	      /* ferry_task_error(NULL, ...) */

int ferry_register_worker_setup(const char *name, ferry_setup_fn fn)
{
	size_t len = name ? strnlen(name, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	int ret = 0;

	if (!fn || !ferry__registry_name_valid(name, len)) {
		FLOG_ERROR(COMP, "cannot register worker setup \"%.*s\": %s", (int)len,
			   name ? name : "", !fn ? "no function" : "bad name");
		return -EINVAL;
	}
	pthread_mutex_lock(&setup_lock);
	if (!setup_fn) {
		setup_fn = fn;
		memcpy(setup_name, name, len);
		setup_name[len] = 0;
	} else if (setup_fn != fn || strcmp(setup_name, name) != 0) {
		if (!setup_other[0]) {
			memcpy(setup_other, name, len);
			setup_other[len] = 0;
		}
		ret = -EEXIST;
	}
	pthread_mutex_unlock(&setup_lock);
	if (ret == -EEXIST)
		FLOG_ERROR(COMP, "a second worker setup function \"%.*s\": one per process",
			   (int)len, name);
	return ret;
}

int ferry__worker_setup_find(ferry_setup_fn *fn, char *name, size_t name_size)
{
	int ret = 0;

	pthread_mutex_lock(&setup_lock);
	*fn = setup_fn;
	if (setup_other[0]) {
		snprintf(name, name_size, "%s and %s", setup_name, setup_other);
		ret = -EEXIST;
	} else {
		snprintf(name, name_size, "%s", setup_name);
	}
	pthread_mutex_unlock(&setup_lock);
	return ret;
}

void ferry__worker_setup_message(char *out, size_t size)
{
	pthread_mutex_lock(&setup_lock);
	snprintf(out, size, "%s", setup_message);
	setup_message[0] = 0;
	pthread_mutex_unlock(&setup_lock);
}

void ferry__worker_setup_reset(void)
{
	pthread_mutex_lock(&setup_lock);
	setup_fn = NULL;
	setup_name[0] = setup_other[0] = setup_message[0] = 0;
	pthread_mutex_unlock(&setup_lock);
}

/* ---- inside a task ---- */

/* @ctx if a running task's (its own thread's slot first: the usual caller), else NULL. */
static struct ferry_task_ctx *ctx_ok(const struct ferry_task_ctx *ctx)
{
	struct ferry_task_ctx *cur = atomic_load(&running[my_slot]);
	unsigned n;

	if (!ctx)
		return NULL;
	if (cur == ctx)
		return cur;
	n = atomic_load(&nslots);
	for (unsigned i = 0; i < n; i++) {
		cur = atomic_load(&running[i]);
		if (cur == ctx)
			return cur;
	}
	return NULL;
}

int ferry_task_node_id(const struct ferry_task_ctx *ctx, struct ferry_node_id *out)
{
	const struct ferry_task_ctx *c = ctx_ok(ctx);

	if (!c || !out)
		return -EINVAL;
	*out = c->w->node_id;
	return 0;
}

size_t ferry_task_num_args(const struct ferry_task_ctx *ctx)
{
	const struct ferry_task_ctx *c = ctx_ok(ctx);

	return c ? c->nargs : 0;
}

int ferry_task_arg(const struct ferry_task_ctx *ctx, size_t i, const void **data, size_t *len)
{
	const struct ferry_task_ctx *c = ctx_ok(ctx);

	if (!c || i >= c->nargs || !data || !len)
		return -EINVAL;
	*data = c->args[i].data;
	*len = c->args[i].len;
	return 0;
}

size_t ferry_task_num_returns(const struct ferry_task_ctx *ctx)
{
	const struct ferry_task_ctx *c = ctx_ok(ctx);

	return c ? c->nrets : 0;
}

/* A buffer of @len bytes for return @i of @c (lock held): ours, or a store create. */
static int return_buffer(struct ferry_task_ctx *c, size_t i, size_t len, void **buf)
{
	struct task_return *r = &c->rets[i];
	struct ferry_object_id oid;
	int ret;

	if (r->set)
		return -EEXIST;
	if (len <= c->inline_max) {
		r->data = ferry__malloc(len ? len : 1);
		if (!r->data)
			return -ENOMEM;
	} else {
		if (!c->w->store)
			return -ENOTCONN;
		ferry_object_id_for_task(&c->task, (uint32_t)i + 1, &oid);
		ret = ferry_plasma_client_create_owned(c->w->store, &oid, len, NULL, 0, 0,
						       &c->caller, &r->data);
		/* A retry of a task whose earlier attempt sealed this return before its worker
		 * died: the same ID holds the same task's value, so it stands; this attempt's
		 * bytes go to a scratch buffer. */
		if (ret == -EEXIST && ferry_plasma_client_contains(c->w->store, &oid) == 1) {
			r->data = ferry__malloc(len);
			ret = r->data ? 0 : -ENOMEM;
			r->sealed = ret == 0;
		}
		if (ret < 0)
			return ret;
		r->in_store = true;
	}
	r->len = len;
	r->set = true;
	*buf = r->data;
	return 0;
}

int ferry_task_return_alloc(struct ferry_task_ctx *ctx, size_t i, size_t len, void **buf)
{
	struct ferry_task_ctx *c = ctx_ok(ctx);
	int ret;

	if (!c || i >= c->nrets || !buf)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ret = return_buffer(c, i, len, buf);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int ferry_task_return(struct ferry_task_ctx *ctx, size_t i, const void *data, size_t len)
{
	void *buf;
	int ret;

	if (len && !data)
		return -EINVAL;
	ret = ferry_task_return_alloc(ctx, i, len, &buf);
	if (ret == 0 && len)
		memcpy(buf, data, len);
	return ret;
}

int ferry_task_error(struct ferry_task_ctx *ctx, const char *fmt, ...)
{
	struct ferry_task_ctx *c = ctx_ok(ctx);
	char *to = c ? c->message : setup_message;
	size_t size = c ? sizeof(c->message) : sizeof(setup_message);
	pthread_mutex_t *lock = c ? &c->lock : &setup_lock;
	va_list ap;

	if ((ctx && !c) || !fmt)
		return -EINVAL;
	va_start(ap, fmt);
	pthread_mutex_lock(lock);
	vsnprintf(to, size, fmt, ap);
	if (c)
		c->has_message = true;
	pthread_mutex_unlock(lock);
	va_end(ap);
	return -EREMOTEIO;
}

/* ---- a PushTask ---- */

/* Set the worker's reason for @status into @c's message; returns @status. */
__attribute__((format(printf, 3, 4))) static int fail(struct ferry_task_ctx *c, int status,
						      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->message, sizeof(c->message), fmt, ap);
	va_end(ap);
	return status;
}

/* Semantic checks beyond what the wire verifier does, then the context's arrays. */
static int check_task(struct ferry__worker *w, struct ferry__wire_push_task_view v,
		      struct ferry_task_ctx *c)
{
	struct ferry__wire_unique_id tid = ferry__wire_push_task_task_id(v);
	struct ferry__wire_unique_id caller = ferry__wire_push_task_caller(v);
	struct ferry__wire_unique_id job = ferry__wire_push_task_job(v);
	uint32_t nargs = ferry__wire_push_task_args_count(v);
	uint32_t nrets = ferry__wire_push_task_num_returns(v);

	if (ferry_id_is_nil(tid.bytes, sizeof(tid.bytes)))
		return fail(c, -EINVAL, "malformed task: no task_id");
	if (ferry_id_is_nil(caller.bytes, sizeof(caller.bytes)))
		return fail(c, -EINVAL, "malformed task: no caller (the owner of its returns)");
	if (nrets > FERRY__WORKER_MAX_RETURNS)
		return fail(c, -EINVAL,
			    "malformed task: num_returns %" PRIu32 " over the cap of %u", nrets,
			    FERRY__WORKER_MAX_RETURNS);
	if (nargs > FERRY__WORKER_MAX_ARGS)
		return fail(c, -EINVAL, "malformed task: %" PRIu32 " arguments over the cap of %u",
			    nargs, FERRY__WORKER_MAX_ARGS);
	if (w->assigned && w->assign_status < 0)
		return fail(c, w->assign_status, "worker %s could not load its job: %s", w->id_hex,
			    w->assign_message);
	if (w->assigned && !ferry_id_is_nil(job.bytes, sizeof(job.bytes)) &&
	    memcmp(job.bytes, w->job.bytes, sizeof(job.bytes)) != 0)
		return fail(c, -EINVAL, "task of another job than this worker's (worker %s)",
			    w->id_hex);
	memcpy(c->task.bytes, tid.bytes, sizeof(tid.bytes));
	memcpy(c->caller.bytes, caller.bytes, sizeof(caller.bytes));
	c->nargs = nargs;
	c->nrets = nrets;
	c->args = ferry__calloc(FERRY_MAX(nargs, 1u), sizeof(*c->args));
	c->views = ferry__calloc(FERRY_MAX(nargs, 1u), sizeof(*c->views));
	c->rets = ferry__calloc(FERRY_MAX(nrets, 1u), sizeof(*c->rets));
	if (!c->args || !c->views || !c->rets)
		return fail(c, -ENOMEM, "worker %s: out of memory for the task", w->id_hex);
	return 0;
}

/* The largest return that travels inline: the task's limit (0: the default), capped so that
 * every return inline at once still fits one reply frame (the rest go to the store). */
static uint64_t inline_limit(struct ferry__wire_push_task_view v, size_t nrets)
{
	uint64_t max = ferry__wire_push_task_inline_max(v);
	uint64_t budget = (FERRY__WORKER_FRAME_MAX / 2) / FERRY_MAX(nrets, (size_t)1);

	if (!max)
		max = FERRY__WORKER_DEFAULT_INLINE_MAX;
	return FERRY_MIN(max, budget);
}

/* How long a task waits for a ref argument's object: the owner pushes a task only once its
 * arguments are ready, so an object that does not come is lost, and the worker must not hang
 * on it. $FERRY_ARG_TIMEOUT_MS (the node's environment, which its workers inherit), else 60 s. */
static int64_t arg_timeout_ms(void)
{
	const char *env = getenv("FERRY_ARG_TIMEOUT_MS");
	char *end = NULL;
	long long v = env && *env ? strtoll(env, &end, 10) : 0;

	return v > 0 && end && !*end ? (int64_t)v : DEFAULT_ARG_TIMEOUT_MS;
}

/* Read the @n ref arguments (objects @ids, argument indexes @which) from the store, waiting
 * for them (the node brings objects held by other nodes) up to arg_timeout_ms(). */
static int get_refs(struct ferry__worker *w, struct ferry_task_ctx *c,
		    const struct ferry_object_id *ids, const size_t *which, size_t n)
{
	char hex[FERRY_ID_HEX_MAX];
	int ret;

	if (!w->store)
		return fail(c, -ENOTCONN, "worker %s has no store to read ref arguments from",
			    w->id_hex);
	ret = ferry_plasma_client_get(w->store, ids, n, arg_timeout_ms(), c->views);
	/* With no view valid the get returned before filling them: nothing is pinned. */
	c->nviews = ret == 0 || ret == -ETIMEDOUT ? n : 0;
	for (size_t k = 0; k < n; k++) {
		int err = ret == -ETIMEDOUT ? c->views[k].status : ret;

		if (err == 0) {
			c->args[which[k]].data = c->views[k].data;
			c->args[which[k]].len = c->views[k].data_size;
			continue;
		}
		ferry_object_id_to_hex(&ids[k], hex, sizeof(hex));
		if (err == -ETIMEDOUT)
			return fail(
				c, err,
				"argument %zu (object %s) did not appear in the store of node %s "
				"within %lld ms",
				which[k], hex, w->node_hex, (long long)arg_timeout_ms());
		return fail(c, err, "argument %zu (object %s) could not be read from the store: %s",
			    which[k], hex, ferry_strerror(err));
	}
	return 0;
}

/* Argument @i, a ref, from its owner (runtime/worker_owner.c) when that is another process
 * on this host and the object is not in the store: it may live in that owner's memory store
 * (a ref the caller borrowed and passed on). 0 (read), 1 (go through the store), < 0. */
static int from_owner(struct ferry__worker *w, struct ferry_task_ctx *c,
		      struct ferry__wire_task_arg_view a, size_t i)
{
	struct ferry__wire_unique_id owner = ferry__wire_task_arg_object_owner(a);
	struct ferry_ref ref = {.id = ferry__wire_task_arg_object_id(a)};
	struct ferry_view *v;
	int ret;

	memcpy(ref.owner.bytes, owner.bytes, sizeof(ref.owner.bytes));
	if (!ferry__worker_owner_serves(w, &ref))
		return 1;
	if (!c->owner_views) {
		c->owner_views = ferry__calloc(c->nargs, sizeof(*c->owner_views));
		if (!c->owner_views)
			return fail(c, -ENOMEM, "worker %s: out of memory for the task", w->id_hex);
	}
	v = &c->owner_views[i];
	ret = ferry_get(&ref, -1, v);
	if (ret < 0)
		return fail(c, ret, "argument %zu: %s", i,
			    v->error[0] ? v->error : ferry_strerror(ret));
	c->args[i].data = v->data ? v->data : "";
	c->args[i].len = v->len;
	return 0;
}

/* Arguments: inline bytes as they are; a ref (is_ref with no bytes: an owner that had the
 * value inlined it) read from the store, pinned until the reply. */
static int resolve_args(struct ferry__worker *w, struct ferry__wire_push_task_view v,
			struct ferry_task_ctx *c)
{
	struct ferry_object_id *ids = NULL;
	size_t *which = NULL, n = 0;
	int ret = 0;

	for (size_t i = 0; i < c->nargs; i++) {
		struct ferry__wire_task_arg_view a = ferry__wire_push_task_args_at(v, (uint32_t)i);

		c->args[i].data = ferry__wire_task_arg_data_data(a);
		c->args[i].len = ferry__wire_task_arg_data_count(a);
		if (!c->args[i].data)
			c->args[i].data = "";
		if (!ferry__wire_task_arg_is_ref(a) || ferry__wire_task_arg_has_data(a))
			continue;
		ret = from_owner(w, c, a, i);
		if (ret < 0)
			goto out;
		if (ret == 0)
			continue;
		ret = 0;
		if (!ids) {
			ids = ferry__calloc(c->nargs, sizeof(*ids));
			which = ferry__calloc(c->nargs, sizeof(*which));
			if (!ids || !which) {
				ret = fail(c, -ENOMEM, "worker %s: out of memory for the task",
					   w->id_hex);
				goto out;
			}
		}
		ids[n] = ferry__wire_task_arg_object_id(a);
		if (ferry_id_is_nil(ids[n].bytes, sizeof(ids[n].bytes))) {
			ret = fail(c, -EINVAL,
				   "malformed task: argument %zu is a ref with no object", i);
			goto out;
		}
		which[n++] = i;
	}
	if (n)
		ret = get_refs(w, c, ids, which, n);
out:
	ferry__free(ids);
	ferry__free(which);
	return ret;
}

/* Find and call the function. */
static int run(struct ferry__worker *w, struct ferry__wire_push_task_view v,
	       struct ferry_task_ctx *c, ferry_task_fn given)
{
	const char *name = ferry__wire_push_task_function(v);
	uint32_t len = ferry__wire_push_task_function_len(v);
	ferry_task_fn fn = given ? given : ferry__registry_find(name, len);
	int ret;

	if (!ferry__registry_name_valid(name, len))
		return fail(c, -EINVAL,
			    "malformed task: its function name is not 1 to %d letters, digits "
			    "or _.:-/",
			    FERRY_FUNCTION_NAME_MAX);
	if (!fn)
		return fail(
			c, -ENOENT,
			"no function '%.*s' on node %s (worker %s): is it in the job's library?",
			(int)len, name, w->node_hex, w->id_hex);
	atomic_store(&running[my_slot], c);
	ret = fn(c);
	atomic_store(&running[my_slot], NULL);
	if (ret > 0)
		return fail(c, -EINVAL, "function '%.*s' returned %d, not 0 or -errno", (int)len,
			    name, ret);
	if (ret < 0 && !c->has_message)
		fail(c, ret, "%s", ferry_strerror(ret));
	return ret;
}

/* Seal the returns created in the store (@status 0), or abort them (a failed task, or one
 * whose earlier return would not seal). Their buffers are the store's: never freed here. */
static int finish_returns(struct ferry__worker *w, struct ferry_task_ctx *c, int status)
{
	struct ferry_object_id oid;
	int ret;

	for (size_t i = 0; c->rets && i < c->nrets; i++) {
		struct task_return *r = &c->rets[i];

		if (!r->in_store)
			continue;
		if (r->sealed) {
			ferry__free(r->data);
			r->data = NULL;
			continue;
		}
		r->data = NULL;
		ferry_object_id_for_task(&c->task, (uint32_t)i + 1, &oid);
		ret = status < 0 ? -ECANCELED : ferry_plasma_client_seal(w->store, &oid);
		if (ret == 0)
			continue;
		(void)ferry_plasma_client_abort(w->store, &oid);
		r->in_store = false;
		if (status == 0)
			status = fail(c, ret, "return %zu could not be sealed in the store: %s", i,
				      ferry_strerror(ret));
	}
	return status;
}

static int build_reply(struct ferry__worker *w, const struct ferry_task_ctx *c,
		       const struct ferry__wire_unique_id *task_id, int status)
{
	struct ferry__wire_push_task_reply m = {.task_id = *task_id, .status = status};
	struct ferry__wire_task_return *rets = NULL;
	int ret;

	memcpy(m.node_id.bytes, w->node_id.bytes, sizeof(m.node_id.bytes));
	if (status < 0) {
		m.message = c->message;
	} else if (c->nrets) {
		rets = ferry__calloc(c->nrets, sizeof(*rets));
		if (!rets)
			return -ENOMEM;
		for (size_t i = 0; i < c->nrets; i++) {
			rets[i].in_store = c->rets[i].in_store;
			rets[i].size = c->rets[i].len;
			if (!rets[i].in_store) {
				rets[i].data = c->rets[i].data;
				rets[i].data_count = c->rets[i].len;
			}
		}
		m.returns = rets;
		m.returns_count = c->nrets;
	}
	ret = ferry__wire_push_task_reply_build(reply_fb(w), &m);
	ferry__free(rets);
	return ret;
}

static void ctx_fini(struct ferry__worker *w, struct ferry_task_ctx *c)
{
	for (size_t i = 0; i < c->nviews; i++)
		if (c->views[i].status == 0)
			(void)ferry_plasma_client_release(w->store, &c->views[i]);
	for (size_t i = 0; c->rets && i < c->nrets; i++)
		if (!c->rets[i].in_store)
			ferry__free(c->rets[i].data);
	for (size_t i = 0; c->owner_views && i < c->nargs; i++)
		ferry_release(&c->owner_views[i]);
	ferry__free(c->owner_views);
	ferry__free(c->args);
	ferry__free(c->views);
	ferry__free(c->rets);
	pthread_mutex_destroy(&c->lock);
}

int ferry__worker_push_task(struct ferry__worker *w, const void *payload, size_t len)
{
	int status;

	(void)len;
	return ferry__worker_run_task(w, ferry__wire_push_task_root_verified(payload), NULL,
				      &status);
}

struct ferry__worker *ferry__worker_of_task(const struct ferry_task_ctx *ctx)
{
	const struct ferry_task_ctx *c = ctx_ok(ctx);

	return c ? c->w : NULL;
}

int ferry__worker_run_task(struct ferry__worker *w, struct ferry__wire_push_task_view v,
			   ferry_task_fn fn, int *result)
{
	struct ferry__wire_unique_id tid = ferry__wire_push_task_task_id(v);
	struct ferry_task_ctx *c = ferry__calloc(1, sizeof(*c));
	int status, ret;

	*result = -ENOMEM;
	if (!c)
		return ferry__worker_error_reply(w, &tid, -ENOMEM, "worker out of memory");
	c->w = w;
	pthread_mutex_init(&c->lock, NULL);
	status = check_task(w, v, c);
	if (status == 0) {
		c->inline_max = inline_limit(v, c->nrets);
		status = resolve_args(w, v, c);
	}
	if (status == 0)
		status = run(w, v, c, fn);
	status = finish_returns(w, c, status);
	if (status < 0)
		FLOG_DEBUG(COMP, "worker %s: task of '%.*s' failed: %s", w->id_hex,
			   (int)FERRY_MIN(ferry__wire_push_task_function_len(v), 128u),
			   ferry__wire_push_task_function(v), c->message);
	ret = build_reply(w, c, &tid, status);
	*result = status;
	__atomic_fetch_add(&w->tasks_run, 1, __ATOMIC_RELAXED); /* concurrent calls too */
	ctx_fini(w, c);
	ferry__free(c);
	return ret;
}

int ferry__worker_error_reply(struct ferry__worker *w, const struct ferry__wire_unique_id *task_id,
			      int status, const char *message)
{
	struct ferry__wire_push_task_reply m = {
		.task_id = *task_id, .status = status, .message = message};

	memcpy(m.node_id.bytes, w->node_id.bytes, sizeof(m.node_id.bytes));
	return ferry__wire_push_task_reply_build(reply_fb(w), &m);
}

int ferry__worker_bounce_reply(struct ferry__worker *w, const void *payload, uint64_t wait_id)
{
	struct ferry__wire_push_task_reply m = {
		.task_id =
			ferry__wire_push_task_task_id(ferry__wire_push_task_root_verified(payload)),
		.bounced_wait = wait_id};

	memcpy(m.node_id.bytes, w->node_id.bytes, sizeof(m.node_id.bytes));
	return ferry__wire_push_task_reply_build(reply_fb(w), &m);
}

int ferry__worker_call(struct ferry__worker *w, ferry_task_fn fn,
		       const struct ferry__worker_buf *args, size_t nargs, void **out,
		       size_t *out_len, char *msg, size_t msg_size)
{
	struct ferry_task_ctx *c = ferry__calloc(1, sizeof(*c));
	int status;

	*out = NULL;
	*out_len = 0;
	if (!c) {
		snprintf(msg, msg_size, "worker %s: out of memory for the call", w->id_hex);
		return -ENOMEM;
	}
	c->w = w;
	pthread_mutex_init(&c->lock, NULL);
	c->nargs = nargs;
	c->nrets = 1;
	/* Every return inline: a graph's values travel in its frames, never in the store. */
	c->inline_max = UINT64_MAX;
	c->args = ferry__calloc(FERRY_MAX(nargs, (size_t)1), sizeof(*c->args));
	c->rets = ferry__calloc(1, sizeof(*c->rets));
	if (!c->args || !c->rets) {
		status = fail(c, -ENOMEM, "worker %s: out of memory for the call", w->id_hex);
	} else {
		for (size_t i = 0; i < nargs; i++) {
			c->args[i].data = args[i].data ? args[i].data : "";
			c->args[i].len = args[i].len;
		}
		atomic_store(&running[my_slot], c);
		status = fn(c);
		atomic_store(&running[my_slot], NULL);
		if (status > 0)
			status =
				fail(c, -EINVAL, "the method returned %d, not 0 or -errno", status);
		else if (status < 0 && !c->has_message)
			fail(c, status, "%s", ferry_strerror(status));
	}
	if (status == 0 && c->rets[0].set) {
		*out = c->rets[0].len ? c->rets[0].data : NULL;
		*out_len = c->rets[0].len;
		if (*out)
			c->rets[0].data = NULL; /* the caller's now */
	}
	if (status < 0)
		snprintf(msg, msg_size, "%s", c->message);
	w->tasks_run++;
	ctx_fini(w, c);
	ferry__free(c);
	return status;
}
