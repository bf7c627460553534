/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public actor calls (include/ferry/runtime.h): create, named lookup, call, kill, drop. They
 * run on the caller's thread, talk to the GCS there (register, list), and post the rest to the
 * runtime's loop, where actor.c runs the actor's life.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "runtime/actor.h"
#include "runtime/registry.h"
#include "runtime/rt.h"

#define COMP "runtime"
#define NAME_MAX_LEN 127

/* Post @fn(@arg) to the loop unless the runtime is going down (-ENOTCONN). */
static int post_locked(void (*fn)(void *arg, int status), void *arg)
{
	int ret = -ENOTCONN;

	pthread_mutex_lock(&ferry__rt.lock);
	if (ferry__rt.up)
		ret = ferry__loop_post(ferry__rt.loop, fn, arg);
	pthread_mutex_unlock(&ferry__rt.lock);
	return ret;
}

static bool name_ok(const char *name, size_t max)
{
	return name && *name && strnlen(name, max + 1) <= max;
}

static struct ferry__rt_actor *actor_new(const char *cls)
{
	struct ferry__rt_actor *a = ferry__rt_actor_alloc();

	if (!a)
		return NULL;
	snprintf(a->cls, sizeof(a->cls), "%s", cls);
	a->state = FERRY_GCS_ACTOR_PENDING;
	a->queue_tail = &a->queue;
	a->inflight_tail = &a->inflight;
	a->incoming_tail = &a->incoming;
	a->revoke.data = a;
	a->resolve.data = a;
	return a;
}

static struct ferry_actor *handle_new(struct ferry__rt_actor *a, bool owner)
{
	struct ferry_actor *h = ferry__calloc(1, sizeof(*h));

	if (h) {
		h->a = a;
		h->owner = owner;
	}
	return h;
}

/* 0 if a live actor is named @name in the GCS, -ENOENT if none, or the GCS's -errno. */
static int find_named(const char *name)
{
	struct ferry_gcs_actor_info *list = NULL;
	int n = ferry_gcs_actor_list(ferry__rt.gcs, &list), found = -ENOENT;

	if (n < 0)
		return n;
	for (int i = 0; i < n && found; i++)
		if (list[i].name && !strcmp(list[i].name, name) &&
		    list[i].state != FERRY_GCS_ACTOR_DEAD)
			found = 0;
	ferry_gcs_free(list);
	return found;
}

int ferry_actor_create(const char *cls, const struct ferry_arg *args, size_t nargs,
		       const struct ferry_actor_opts *opts, struct ferry_actor **out)
{
	static const struct ferry_actor_opts defaults;
	const struct ferry_actor_opts *o = opts ? opts : &defaults;
	struct ferry_task_opts to = {.num_cpus = o->num_cpus,
				     .num_gpus = o->num_gpus,
				     .memory_bytes = o->memory_bytes,
				     .resources = o->resources,
				     .max_retries = -1,
				     .pg = o->pg,
				     .pg_bundle = o->pg_bundle,
				     .strategy = o->strategy,
				     .affinity_node = o->affinity_node,
				     .affinity_soft = o->affinity_soft};
	size_t len = cls ? strnlen(cls, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	struct ferry_gcs_actor_info info = {0};
	struct ferry_actor *h = NULL;
	struct ferry__rt_actor *a = NULL;
	int ret;

	if (!out || !ferry__registry_name_valid(cls, len) || memchr(cls, '.', len) ||
	    (nargs && !args) || (o->name && !name_ok(o->name, NAME_MAX_LEN)) ||
	    o->max_concurrency > FERRY_ACTOR_MAX_CONCURRENCY || (o->detached && !o->name)) {
		FLOG_ERROR(COMP, "ferry_actor_create: %s",
			   !out						? "no handle pointer"
			   : nargs && !args				? "no arguments array"
			   : o->name && !name_ok(o->name, NAME_MAX_LEN) ? "bad actor name"
			   : o->max_concurrency > FERRY_ACTOR_MAX_CONCURRENCY
				   ? "max_concurrency over FERRY_ACTOR_MAX_CONCURRENCY"
			   : o->detached && !o->name ? "a detached actor needs a name"
						     : "bad class name");
		return -EINVAL;
	}
	if (!ferry__rt.up)
		return -ENOTCONN;
	if (!ferry__rt.code_path[0]) {
		FLOG_ERROR(COMP,
			   "ferry_actor_create %s: this job has no code for workers: name its "
			   "shared library in ferry_init_opts.code_path or $FERRY_CODE",
			   cls);
		return -ENOEXEC;
	}
	if (o->name) {
		ret = find_named(o->name);
		if (ret == 0) {
			FLOG_ERROR(COMP, "ferry_actor_create %s: an actor named \"%s\" is alive",
				   cls, o->name);
			return -EEXIST;
		}
		if (ret != -ENOENT)
			return ret;
	}
	a = actor_new(cls);
	h = a ? handle_new(a, true) : NULL;
	ret = h ? ferry__rt_task_new(cls, args, nargs, &to, &a->ctor) : -ENOMEM;
	if (ret < 0)
		goto err;
	a->owned = true;
	a->key = a->ctor->key;
	a->max_restarts = o->max_restarts;
	a->max_task_retries = o->max_task_retries;
	a->max_concurrency = o->max_concurrency;
	a->detached = o->detached != 0;
	a->ctor->num_returns = 0;
	ferry_actor_id_random(&a->id);
	pthread_mutex_lock(&ferry__rt.lock);
	ret = ferry__rt_task_register(a->ctor, NULL); /* its id; no returns */
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ret < 0)
		goto err;
	info.id = a->id;
	info.job = ferry__rt.job;
	if (!a->detached) /* nil: the cluster's, not a process's (get_named reads it so) */
		info.owner = ferry__rt.self;
	info.name = o->name;
	info.class_name = a->cls;
	info.state = FERRY_GCS_ACTOR_PENDING;
	info.max_restarts = o->max_restarts;
	ret = ferry_gcs_actor_register(ferry__rt.gcs, &info);
	if (ret < 0) {
		FLOG_ERROR(COMP, "ferry_actor_create %s: the GCS's actors table: %s", cls,
			   ferry_strerror(ret));
		/* The GCS may have recorded it before the error (its reply lost): a PENDING
		 * record nobody starts would hold its name forever. -ENOENT if it never came. */
		(void)ferry_gcs_actor_update(ferry__rt.gcs, &a->id, FERRY_GCS_ACTOR_DEAD, NULL,
					     NULL, FERRY_GCS_EXIT_ERROR,
					     "its owner's create failed");
		goto err;
	}
	ret = post_locked(ferry__rt_actor_start, a);
	if (ret < 0) {
		(void)ferry_gcs_actor_update(ferry__rt.gcs, &a->id, FERRY_GCS_ACTOR_DEAD, NULL,
					     NULL, FERRY_GCS_EXIT_ERROR,
					     "its owner could not start it");
		goto err;
	}
	*out = h;
	return 0;
err:
	if (a)
		ferry__rt_actor_free(a);
	ferry__free(h);
	return ret;
}

int ferry_actor_get_named(const char *name, struct ferry_actor **out)
{
	struct ferry_gcs_actor_info *list = NULL, *found = NULL;
	struct ferry_actor *h = NULL;
	struct ferry__rt_actor *a = NULL;
	int n, ret;

	if (!out || !name_ok(name, NAME_MAX_LEN))
		return -EINVAL;
	if (!ferry__rt.up)
		return -ENOTCONN;
	n = ferry_gcs_actor_list(ferry__rt.gcs, &list);
	if (n < 0)
		return n;
	for (int i = 0; i < n && !found; i++)
		if (list[i].name && !strcmp(list[i].name, name) &&
		    list[i].state != FERRY_GCS_ACTOR_DEAD)
			found = &list[i];
	ret = found ? 0 : -ENOENT;
	if (found) {
		a = actor_new(found->class_name ? found->class_name : "?");
		h = a ? handle_new(a, false) : NULL;
		ret = h ? 0 : -ENOMEM;
	}
	if (ret == 0) {
		a->id = found->id;
		a->detached = ferry_id_is_nil(found->owner.bytes, sizeof(found->owner.bytes));
		a->worker = found->worker;
		a->node = found->node;
		a->state = found->state == FERRY_GCS_ACTOR_ALIVE ? FERRY_GCS_ACTOR_ALIVE
								 : FERRY_GCS_ACTOR_RESTARTING;
		ret = post_locked(ferry__rt_actor_start, a);
	}
	ferry_gcs_free(list);
	if (ret < 0) {
		if (a)
			ferry__rt_actor_free(a);
		ferry__free(h);
		if (ret == -ENOENT)
			FLOG_INFO(COMP, "no live actor named \"%s\"", name);
		return ret;
	}
	*out = h;
	return 0;
}

int ferry_actor_call(struct ferry_actor *h, const char *method, const struct ferry_arg *args,
		     size_t nargs, uint32_t num_returns, struct ferry_ref *returns)
{
	struct ferry_task_opts to = {.num_returns = num_returns, .max_retries = -1};
	char name[FERRY_FUNCTION_NAME_MAX + 2];
	struct ferry__rt_task *t;
	struct ferry__rt_actor *a;
	int n, ret;

	if (!h || !method || !returns || (nargs && !args))
		return -EINVAL;
	a = h->a;
	n = snprintf(name, sizeof(name), "%s.%s", a->cls, method);
	if (n < 0 || !ferry__registry_name_valid(name, (size_t)n)) {
		FLOG_ERROR(COMP, "ferry_actor_call: bad method name \"%.60s\"", method);
		return -EINVAL;
	}
	if (!ferry__rt.up)
		return -ENOTCONN;
	ret = ferry__rt_task_new(name, args, nargs, &to, &t);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&ferry__rt.lock);
	ret = ferry__rt_task_register(t, returns);
	if (ret == 0)
		ferry__rt_tev_record(t, FERRY_GCS_TASK_SUBMITTED, NULL, NULL);
	if (ret == 0 && !a->incoming_posted) {
		if (ferry__loop_post(ferry__rt.loop, ferry__rt_actor_take_calls, a) == 0) {
			a->incoming_posted = true;
		} else {
			ferry__rt_task_unregister(t, returns, t->num_returns);
			ret = -ENOMEM;
		}
	}
	if (ret == 0) {
		t->next = NULL;
		*a->incoming_tail = t;
		a->incoming_tail = &t->next;
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ret < 0)
		ferry__rt_task_free(t);
	return ret;
}

static int post_kill(struct ferry__rt_actor *a, bool restart)
{
	struct ferry__rt_actor_kill *k = ferry__calloc(1, sizeof(*k));
	int ret;

	if (!k)
		return -ENOMEM;
	k->a = a;
	k->restart = restart;
	ret = post_locked(ferry__rt_actor_do_kill, k);
	if (ret < 0)
		ferry__free(k);
	return ret;
}

int ferry_actor_kill(struct ferry_actor *h, int no_restart)
{
	if (!h)
		return -EINVAL;
	if (!h->owner && !h->a->detached)
		return -EPERM;
	return post_kill(h->a, !no_restart && h->owner);
}

int ferry_actor_id(const struct ferry_actor *h, struct ferry_actor_id *out)
{
	if (!h || !out)
		return -EINVAL;
	*out = h->a->id;
	return 0;
}

void ferry_actor_drop(struct ferry_actor *h)
{
	if (!h)
		return;
	if (h->owner && !h->a->detached)
		(void)post_kill(h->a, false);
	/* After the kill (posts run in order); refused at shutdown, which frees every record. */
	(void)post_locked(ferry__rt_actor_release, h->a);
	ferry__free(h);
}
