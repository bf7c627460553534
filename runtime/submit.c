/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_submit() and a task's life on the owner's side before and after its worker: the
 * task's id and return refs, its arguments (small ones copied inline, large ones put in the
 * store, refs counted until the task ends), the dependency resolver (a task whose ref
 * arguments are still pending waits here, Ray's way, and goes to a lease once they are ready),
 * and the reply that fills its returns.
 *
 * DESIGN
 * - ferry_submit (any thread) builds the task, records its returns as pending under the lock,
 *   and pushes it on `incoming` (common/postq.h); one drain takes the batch to the loop thread.
 * - Loop thread: take_incoming() checks each task's arguments; a pending one parks the task
 *   on `blocked`. Whenever an object becomes ready (ferry__rt_sub_object_ready, any thread,
 *   lock held) one rescan is posted. A failed argument fails the task with the argument's
 *   error (its returns then hold it: errors flow down a graph as values).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/postq.h"
#include "runtime/registry.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"
#define DEFAULT_MAX_RETRIES 3

/* Tasks waiting for arguments: changed on the loop thread with ferry__rt.lock held, so that
 * ferry__rt_sub_object_ready (lock held, any thread) posts a rescan only when one waits. */
static struct ferry__rt_task *blocked;
static size_t nblocked;
static bool rescan_posted;
/* Submitted, not yet taken by the loop thread. */
static struct ferry__postq incoming;

/* hash(job, parent task, submit index): a resubmitted graph makes the same ids. */
static void task_id_for(uint32_t seq, struct ferry_task_id *out)
{
	uint8_t buf[2 * FERRY_UNIQUE_ID_SIZE + sizeof(seq) + 1];
	uint64_t h[2];

	memcpy(buf, ferry__rt.job.bytes, FERRY_UNIQUE_ID_SIZE);
	memcpy(buf + FERRY_UNIQUE_ID_SIZE, ferry__rt.root_task.bytes, FERRY_UNIQUE_ID_SIZE);
	memcpy(buf + 2 * FERRY_UNIQUE_ID_SIZE, &seq, sizeof(seq));
	h[0] = ferry_id_hash(buf, sizeof(buf) - 1);
	buf[sizeof(buf) - 1] = 0x5a; /* a second, independent half */
	h[1] = ferry_id_hash(buf, sizeof(buf));
	memcpy(out->bytes, h, sizeof(out->bytes));
	if (ferry_id_is_nil(out->bytes, sizeof(out->bytes)))
		out->bytes[0] = 1;
}

void ferry__rt_task_free(struct ferry__rt_task *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&ferry__rt.lock);
	ferry__rt_task_free_locked(t);
	pthread_mutex_unlock(&ferry__rt.lock);
}

void ferry__rt_task_free_locked(struct ferry__rt_task *t)
{
	if (t->lineage_refs)
		ferry__rt_lineage_detach(t);
	for (size_t i = 0; i < t->nargs; i++) {
		struct ferry__rt_arg *a = &t->args[i];
		struct ferry__rt_obj *o = a->counted ? ferry__rt_obj_find(&a->ref.id) : NULL;

		if (o)
			ferry__rt_obj_unref(o);
		ferry__free(a->data);
	}
	ferry__free(t->args);
	ferry__free(t);
}

/*
 * Resource specs ("name=amount,..."), interned: a class key holds a pointer, the same one for
 * equal specs (keys compare by memcmp), so a pending task carries 8 bytes of it instead of
 * FERRY__RT_CUSTOM_MAX. A process uses few distinct specs; at most INTERN_MAX, then -ENOSPC.
 */
#define INTERN_MAX 1024
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static char *interned[INTERN_MAX];
static unsigned ninterned;

static int intern(const char *spec, const char **out)
{
	int ret = 0;
	unsigned i;

	pthread_mutex_lock(&intern_lock);
	for (i = 0; i < ninterned && strcmp(interned[i], spec); i++)
		;
	if (i == ninterned) {
		if (ninterned == INTERN_MAX)
			ret = -ENOSPC;
		else if (!(interned[ninterned] = ferry__strdup(spec)))
			ret = -ENOMEM;
		else
			ninterned++;
	}
	if (ret == 0)
		*out = interned[i];
	pthread_mutex_unlock(&intern_lock);
	if (ret == -ENOSPC)
		FLOG_ERROR(COMP, "task resources \"%.40s\": more than %d distinct resource specs",
			   spec, INTERN_MAX);
	return ret;
}

void ferry__rt_intern_fini(void)
{
	pthread_mutex_lock(&intern_lock);
	while (ninterned)
		ferry__free(interned[--ninterned]);
	pthread_mutex_unlock(&intern_lock);
}

static int set_key(struct ferry__rt_task *t, const struct ferry_task_opts *o)
{
	int ret;

	memset(&t->key, 0, sizeof(t->key));
	t->key.cpus = o->num_cpus > 0 ? o->num_cpus : 1;
	t->key.gpus = o->num_gpus > 0 ? o->num_gpus : 0;
	t->key.memory_bytes = o->memory_bytes > 0 ? o->memory_bytes : 0;
	if (o->resources && strlen(o->resources) >= FERRY__RT_CUSTOM_MAX) {
		FLOG_ERROR(COMP, "task resources \"%.40s...\": longer than %d bytes", o->resources,
			   FERRY__RT_CUSTOM_MAX - 1);
		return -EINVAL;
	}
	if (o->resources && *o->resources && (ret = intern(o->resources, &t->key.custom)) < 0)
		return ret;
	if (o->pg && ferry__rt_pg_key(o->pg, o->pg_bundle, &t->key) < 0)
		return -EINVAL;
	if ((unsigned)o->strategy > FERRY_SCHED_NODE_AFFINITY ||
	    (o->strategy == FERRY_SCHED_NODE_AFFINITY &&
	     ferry_id_is_nil(o->affinity_node.bytes, sizeof(o->affinity_node.bytes)))) {
		FLOG_ERROR(COMP, "task strategy %d%s", (int)o->strategy,
			   o->strategy == FERRY_SCHED_NODE_AFFINITY ? " with no affinity_node"
								    : ": no such strategy");
		return -EINVAL;
	}
	t->key.strategy = (uint8_t)o->strategy;
	if (o->strategy == FERRY_SCHED_NODE_AFFINITY) {
		t->key.affinity = o->affinity_node;
		t->key.affinity_soft = o->affinity_soft != 0;
	}
	t->num_returns = o->num_returns ? o->num_returns : 1;
	t->retries_left = o->max_retries == 0  ? DEFAULT_MAX_RETRIES
			  : o->max_retries < 0 ? 0
					       : o->max_retries;
	t->retry_exceptions = o->retry_exceptions != 0;
	return 0;
}

/* One argument: bytes copied (or put in the store when large), or a ref (counted if ours). */
static int set_arg(struct ferry__rt_arg *a, const struct ferry_arg *in)
{
	int ret;

	if (in->ref) {
		a->is_ref = true;
		a->counted = ferry__rt_is_self(&in->ref->owner);
		if (a->counted)
			return ferry_ref_dup(in->ref, &a->ref);
		a->ref = *in->ref;
		return 0;
	}
	if (!in->data && in->len)
		return -EINVAL;
	if (in->len > ferry__rt.inline_max) {
		ret = ferry_put(in->data, in->len, &a->ref);
		a->is_ref = a->counted = ret == 0;
		return ret;
	}
	a->len = in->len;
	if (!in->len)
		return 0;
	a->data = ferry__malloc(in->len);
	if (!a->data)
		return -ENOMEM;
	memcpy(a->data, in->data, in->len);
	return 0;
}

int ferry__rt_task_new(const char *name, const struct ferry_arg *args, size_t nargs,
		       const struct ferry_task_opts *opts, struct ferry__rt_task **out)
{
	static const struct ferry_task_opts defaults;
	size_t name_size = strlen(name) + 1;
	struct ferry__rt_task *t = ferry__calloc(1, sizeof(*t) + name_size);
	int ret;

	if (!t)
		return -ENOMEM;
	memcpy(t->name, name, name_size);
	ret = set_key(t, opts ? opts : &defaults);
	if (ret < 0)
		goto err_free;
	t->args = nargs ? ferry__calloc(nargs, sizeof(*t->args)) : NULL;
	if (nargs && !t->args) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (; t->nargs < nargs; t->nargs++) {
		ret = set_arg(&t->args[t->nargs], &args[t->nargs]);
		if (ret < 0)
			goto err_free;
	}
	*out = t;
	return 0;
err_free:
	ferry__rt_task_free(t);
	return ret;
}

/* Lock held: give @t its id and record its returns as pending objects. */
int ferry__rt_task_register(struct ferry__rt_task *t, struct ferry_ref *returns)
{
	uint32_t i;

	if (!ferry__rt.up)
		return -ENOTCONN;
	task_id_for(++ferry__rt.submit_seq, &t->id);
	for (i = 0; i < t->num_returns; i++) {
		ferry_object_id_for_task(&t->id, i + 1, &returns[i].id);
		returns[i].owner = ferry__rt.self;
		if (!ferry__rt_obj_add(&returns[i].id, FERRY__RT_PENDING))
			goto err_returns;
	}
	return 0;
err_returns:
	ferry__rt_task_unregister(t, returns, i);
	return -ENOMEM;
}

/* Lock held: undo ferry__rt_task_register's first @n returns. */
void ferry__rt_task_unregister(struct ferry__rt_task *t, struct ferry_ref *returns, uint32_t n)
{
	while (n--)
		ferry__rt_obj_unref(ferry__rt_obj_find(&returns[n].id));
	if (returns)
		memset(returns, 0, t->num_returns * sizeof(*returns));
}

/* Lock held: record the returns as pending objects and queue @t for the loop. */
static int queue_task(struct ferry__rt_task *t, struct ferry_ref *returns)
{
	int ret = ferry__rt_task_register(t, returns);

	if (ret < 0)
		return ret;
	ferry__rt_tev_record(t, FERRY_GCS_TASK_SUBMITTED, NULL, NULL); /* its ID is set now */
	/* Cannot be refused: `up` (checked under the lock) is cleared before the loop goes. */
	(void)ferry__postq_push(&incoming, t);
	return 0;
}

int ferry_submit(const char *name, const struct ferry_arg *args, size_t nargs,
		 const struct ferry_task_opts *opts, struct ferry_ref *returns)
{
	size_t len = name ? strnlen(name, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	struct ferry__rt_task *t;
	int ret;

	if (!ferry__registry_name_valid(name, len) || (nargs && !args) || !returns) {
		FLOG_ERROR(COMP, "ferry_submit: %s",
			   !returns	    ? "no returns array"
			   : nargs && !args ? "no arguments array"
					    : "bad function name");
		return -EINVAL;
	}
	if (!ferry__rt.up)
		return -ENOTCONN;
	if (!ferry__rt.code_path[0]) { /* set once by ferry_init */
		FLOG_ERROR(COMP,
			   "ferry_submit %s: this job has no code for workers to run: name "
			   "its shared library in ferry_init_opts.code_path or $FERRY_CODE",
			   name);
		return -ENOEXEC;
	}
	ret = ferry__rt_task_new(name, args, nargs, opts, &t);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&ferry__rt.lock);
	ret = queue_task(t, returns);
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ret < 0)
		ferry__rt_task_free(t);
	return ret;
}

/* Lock held. 1: every argument ready; 0: one pending; < 0: one failed (@msg says). */
int ferry__rt_task_args_ready(const struct ferry__rt_task *t, char *msg, size_t size)
{
	for (size_t i = 0; i < t->nargs; i++) {
		const struct ferry__rt_arg *a = &t->args[i];
		struct ferry__rt_obj *o = a->counted ? ferry__rt_obj_find(&a->ref.id) : NULL;

		if (!o)
			continue; /* inline bytes, or another owner's object: the worker gets it */
		if (o->state == FERRY__RT_PENDING)
			return 0;
		if (o->state == FERRY__RT_ERROR) {
			snprintf(msg, size, "argument %zu: %s", i,
				 o->error ? o->error : ferry_strerror(o->status));
			return o->status < 0 ? o->status : -EIO;
		}
	}
	return 1;
}

/*
 * Lock held, @t's arguments ready: the node holding most of their bytes becomes part of its
 * class (struct ferry__rt_class_key.locality), so that tasks whose inputs live in different
 * places take different leases, and its node can send the lease there (node/rt_sched.c). Only
 * our own objects count: a borrowed ref's location would need the GCS directory, and is left
 * out. FERRY_SCHED_LOCALITY=off in the environment leaves every class without one: the
 * scheduler then does not see where inputs are (the baseline of bench/compare sched).
 */
static void set_locality(struct ferry__rt_task *t)
{
	struct {
		struct ferry_node_id node;
		uint64_t bytes;
	} sums[8];
	static int off = -1; /* FERRY_SCHED_LOCALITY=off: read once, under the lock */
	size_t n = 0, best = 0;

	memset(&t->key.locality, 0, sizeof(t->key.locality));
	t->key.locality_bytes = 0;
	if (off < 0) {
		const char *v = getenv("FERRY_SCHED_LOCALITY");
		off = v && !strcmp(v, "off");
	}
	/* Affinity names the node, and a placement group's bundle is on its own node. */
	if (t->key.strategy == FERRY_SCHED_NODE_AFFINITY ||
	    !ferry_id_is_nil(t->key.pg, sizeof(t->key.pg)) || off)
		return;
	for (size_t i = 0; i < t->nargs; i++) {
		const struct ferry__rt_arg *a = &t->args[i];
		struct ferry__rt_obj *o = a->counted ? ferry__rt_obj_find(&a->ref.id) : NULL;
		size_t j = 0;

		if (!o || o->state != FERRY__RT_IN_STORE ||
		    ferry_id_is_nil(o->node.bytes, sizeof(o->node.bytes)))
			continue;
		while (j < n && memcmp(&sums[j].node, &o->node, sizeof(o->node)))
			j++;
		if (j == n && n == sizeof(sums) / sizeof(sums[0]))
			continue; /* more places than tracked: the rest do not decide */
		if (j == n) {
			sums[n].node = o->node;
			sums[n++].bytes = 0;
		}
		sums[j].bytes += o->store_bytes;
		if (sums[j].bytes > sums[best].bytes)
			best = j;
	}
	if (n && sums[best].bytes >= FERRY__RT_LOCALITY_MIN) {
		t->key.locality = sums[best].node;
		t->key.locality_bytes = sums[best].bytes;
	}
}

/* Send @t on, park it, or fail it. Loop thread. */
static void route(struct ferry__rt_task *t)
{
	char msg[200];
	int ret;

	pthread_mutex_lock(&ferry__rt.lock);
	ret = ferry__rt_task_args_ready(t, msg, sizeof(msg));
	if (ret == 0) {
		t->next = blocked;
		blocked = t;
		nblocked++;
	} else if (ret > 0) {
		set_locality(t);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ret > 0)
		ferry__rt_lease_enqueue(t, false);
	else if (ret < 0)
		ferry__rt_task_fail(t, ret, msg);
}

void ferry__rt_task_route(struct ferry__rt_task *t)
{
	memset(&t->key.locality, 0, sizeof(t->key.locality)); /* where its inputs are now */
	t->key.locality_bytes = 0;
	route(t);
}

/* Route each task of @list, or fail them all when the loop is going away (@status < 0). */
static void route_list(struct ferry__rt_task *list, int status)
{
	while (list) {
		struct ferry__rt_task *t = list;

		list = t->next;
		if (status < 0)
			ferry__rt_task_fail(t, -ECANCELED, "the driver shut down");
		else
			route(t);
	}
}

static void take_incoming(struct ferry__postq *q, void *list, int status)
{
	(void)q;
	route_list(list, status);
}

/* Before the loop runs: submits go to ferry__rt.loop. */
void ferry__rt_submit_init(void)
{
	ferry__postq_init(&incoming, ferry__rt.loop, offsetof(struct ferry__rt_task, next),
			  take_incoming);
}

static void rescan(void *arg, int status)
{
	struct ferry__rt_task *list;

	(void)arg;
	pthread_mutex_lock(&ferry__rt.lock);
	rescan_posted = false;
	list = blocked;
	blocked = NULL;
	nblocked = 0;
	pthread_mutex_unlock(&ferry__rt.lock);
	route_list(list, status);
}

void ferry__rt_sub_object_ready(void)
{
	ferry__rt_actor_object_ready();
	if (!nblocked || rescan_posted || !ferry__rt.loop)
		return;
	if (ferry__loop_post(ferry__rt.loop, rescan, NULL) == 0)
		rescan_posted = true;
}

/* Loop thread, at shutdown: every task still waiting ends with -ECANCELED. */
void ferry__rt_submit_cancel(void)
{
	take_incoming(&incoming, ferry__postq_take(&incoming), -ECANCELED);
	rescan(NULL, -ECANCELED);
}

void ferry__rt_task_error_text(const struct ferry__rt_task *t, const struct ferry_node_id *node,
			       const char *what, char *out, size_t size)
{
	char hex[FERRY_ID_HEX_MAX] = "?";

	if (node && !ferry_id_is_nil(node->bytes, sizeof(node->bytes)))
		ferry_node_id_to_hex(node, hex, sizeof(hex));
	snprintf(out, size, "function %s on node %.12s: %s", t->name, hex, what);
}

/* Fill @t's returns (lock taken here): each in @states/@datas, or all with @status. True if
 * @t is kept as the lineage of returns in a store (lineage.c): not to be freed. */
static bool set_returns(struct ferry__rt_task *t, int status, const char *message,
			struct ferry__wire_push_task_reply_view *r)
{
	bool kept;

	pthread_mutex_lock(&ferry__rt.lock);
	for (uint32_t i = 0; i < t->num_returns; i++) {
		struct ferry_object_id id;
		struct ferry__rt_obj *o;
		struct ferry__wire_task_return_view v = {0};
		bool in_store = false;

		ferry_object_id_for_task(&t->id, i + 1, &id);
		if (r && i < ferry__wire_push_task_reply_returns_count(*r)) {
			v = ferry__wire_push_task_reply_returns_at(*r, i);
			in_store = ferry__wire_task_return_in_store(v);
		}
		o = ferry__rt_obj_find(&id);
		if (!o || o->state != FERRY__RT_PENDING) {
			/* Dropped before it was ready: its store copy goes now. */
			if (!o && in_store && ferry__rt.store) {
				(void)ferry_plasma_client_delete(ferry__rt.store, &id, 1, NULL);
				ferry__rt_free_queue(&id);
			}
			continue;
		}
		if (status < 0) {
			ferry__rt_obj_ready(o, FERRY__RT_ERROR, NULL, 0, status, message);
		} else if (in_store) {
			struct ferry__wire_unique_id n = ferry__wire_push_task_reply_node_id(*r);

			memcpy(o->node.bytes, n.bytes, sizeof(o->node.bytes));
			o->store_bytes = ferry__wire_task_return_size(v);
			ferry__rt_lineage_attach(t, o);
			ferry__rt_obj_ready(o, FERRY__RT_IN_STORE, NULL, 0, 0, NULL);
		} else {
			size_t len = v.tab.buf ? ferry__wire_task_return_data_count(v) : 0;
			void *data = ferry__malloc(len ? len : 1);

			if (!data) {
				ferry__rt_obj_ready(o, FERRY__RT_ERROR, NULL, 0, -ENOMEM,
						    "out of memory for the task's return");
				continue;
			}
			if (len)
				memcpy(data, ferry__wire_task_return_data_data(v), len);
			ferry__rt_obj_ready(o, FERRY__RT_INLINE, data, len, 0, NULL);
		}
	}
	t->rerun = false; /* made again, if it was */
	kept = t->lineage_refs > 0;
	pthread_mutex_unlock(&ferry__rt.lock);
	return kept;
}

void ferry__rt_task_fail(struct ferry__rt_task *t, int status, const char *message)
{
	ferry__rt_tev_record(t, FERRY_GCS_TASK_FAILED, NULL, NULL);
	(void)set_returns(t, status, message, NULL);
	ferry__rt_task_free(t);
}

struct ferry__wire_push_task_reply_view ferry__rt_push_reply_view(const void *payload,
								  struct ferry_task_id *id)
{
	struct ferry__wire_push_task_reply_view v =
		ferry__wire_push_task_reply_root_verified(payload);
	struct ferry__wire_unique_id wid = ferry__wire_push_task_reply_task_id(v);

	memcpy(id->bytes, wid.bytes, sizeof(id->bytes));
	return v;
}

int ferry__rt_task_reply(struct ferry__rt_task *t, struct ferry__wire_push_task_reply_view r)
{
	int status = ferry__wire_push_task_reply_status(r);
	struct ferry__wire_unique_id wid = ferry__wire_push_task_reply_node_id(r);
	struct ferry_node_id node;
	char what[200], text[400];
	const char *m;

	memcpy(node.bytes, wid.bytes, sizeof(node.bytes));
	if (status >= 0) {
		ferry__rt_tev_record(t, FERRY_GCS_TASK_FINISHED, &node, NULL);
		if (!set_returns(t, 0, NULL, &r))
			ferry__rt_task_free(t);
		return 0;
	}
	if (t->retry_exceptions && t->retries_left > 0) {
		ferry__rt_tev_record(t, FERRY_GCS_TASK_FAILED, &node, NULL); /* this attempt */
		t->retries_left--;
		t->attempt++;
		return 1;
	}
	m = ferry__wire_push_task_reply_message(r);
	snprintf(what, sizeof(what), "%.*s",
		 m ? (int)ferry__wire_push_task_reply_message_len(r) : 0, m ? m : "");
	if (!what[0])
		snprintf(what, sizeof(what), "%s", ferry_strerror(status));
	ferry__rt_task_error_text(t, &node, what, text, sizeof(text));
	ferry__rt_task_fail(t, status, text);
	return 0;
}

/* Lock held: argument @a as the worker gets it: bytes of our memory store inline. */
static void wire_arg(const struct ferry__rt_arg *a, struct ferry__wire_task_arg *w)
{
	struct ferry__rt_obj *o = a->counted ? ferry__rt_obj_find(&a->ref.id) : NULL;

	if (!a->is_ref || (o && o->state == FERRY__RT_INLINE)) {
		w->data = o ? o->data : a->data;
		w->data_count = o ? o->len : a->len;
		if (!w->data)
			w->data = (const uint8_t *)""; /* an empty argument, present */
		return;
	}
	w->is_ref = true;
	w->object_id = a->ref.id;
	memcpy(w->object_owner.bytes, a->ref.owner.bytes, sizeof(w->object_owner.bytes));
}

int ferry__rt_task_build(const struct ferry__rt_task *t, struct ferry__fb_builder *b)
{
	return ferry__rt_task_build_as(t, b, FERRY__WIRE_MSG_PUSH_TASK, NULL);
}

int ferry__rt_task_build_as(const struct ferry__rt_task *t, struct ferry__fb_builder *b,
			    uint16_t type, const struct ferry_actor_id *actor)
{
	return ferry__rt_task_build_actor(t, b, type, actor, 0, false);
}

int ferry__rt_task_build_actor(const struct ferry__rt_task *t, struct ferry__fb_builder *b,
			       uint16_t type, const struct ferry_actor_id *actor,
			       uint32_t max_concurrency, bool detached)
{
	struct ferry__wire_task_arg *args = NULL;
	struct ferry__wire_push_task m = {0};
	int ret;

	if (t->nargs) {
		args = ferry__calloc(t->nargs, sizeof(*args));
		if (!args)
			return -ENOMEM;
	}
	memcpy(m.task_id.bytes, t->id.bytes, sizeof(m.task_id.bytes));
	memcpy(m.job.bytes, ferry__rt.job.bytes, sizeof(m.job.bytes));
	memcpy(m.caller.bytes, ferry__rt.self.bytes, sizeof(m.caller.bytes));
	m.function = t->name;
	m.num_returns = t->num_returns;
	m.attempt = t->attempt;
	m.inline_max = ferry__rt.inline_max;
	m.args = args;
	m.args_count = t->nargs;
	/* The memory store's bytes are read under the lock: a drop cannot free them (the task
	 * holds a count), but the lock also orders the read after the reply that wrote them. */
	pthread_mutex_lock(&ferry__rt.lock);
	for (size_t i = 0; i < t->nargs; i++)
		wire_arg(&t->args[i], &args[i]);
	if (type == FERRY__WIRE_MSG_ACTOR_CREATE) {
		struct ferry__wire_actor_create am = {
			.task = &m, .max_concurrency = max_concurrency, .detached = detached};

		memcpy(am.actor_id.bytes, actor->bytes, sizeof(am.actor_id.bytes));
		ret = ferry__wire_actor_create_build(b, &am);
	} else if (type == FERRY__WIRE_MSG_ACTOR_CALL) {
		struct ferry__wire_actor_call am = {.task = &m};

		/* A named actor's caller may be a driver of another job: the worker checks the
		 * actor's ID instead. */
		memset(&m.job, 0, sizeof(m.job));
		memcpy(am.actor_id.bytes, actor->bytes, sizeof(am.actor_id.bytes));
		ret = ferry__wire_actor_call_build(b, &am);
	} else {
		ret = ferry__wire_push_task_build(b, &m);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry__free(args);
	return ret < 0 ? ret : 0;
}

struct ferry__rt_task *ferry__rt_task_take(struct ferry__rt_task **head,
					   struct ferry__rt_task ***tail, uint32_t *n,
					   const struct ferry_task_id *id)
{
	struct ferry__rt_task **pp = head, *t;

	for (; (t = *pp); pp = &t->next) {
		if (!ferry_task_id_eq(&t->id, id))
			continue;
		*pp = t->next;
		if (*tail == &t->next)
			*tail = pp;
		(*n)--;
		t->next = NULL;
		return t;
	}
	return NULL;
}
