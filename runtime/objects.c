/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Objects and refs on the driver's side: the owner table (object id -> count, state, inline
 * bytes), ferry_put / ferry_create / ferry_seal into the node's store, ferry_get (a view of the
 * memory store or of the store, zero copy), ferry_wait, ferry_ref_dup / ferry_ref_drop.
 * Locking: runtime/rt.h DESIGN.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/loop.h"
#include "runtime/owner.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"
/* A wait for objects that another process owns polls the store this often: their owner wakes
 * no condvar here. */
#define FOREIGN_POLL_MS 10
#define FIRST_ANSWER_MS 5 /* a wait's first look at other owners: ready ones answer at once */
/* A get of another owner's object checks the GCS for the owner's death this often. */
#define OWNER_CHECK_MS 200
#define STORE_SLICE_MS 100 /* a get of our object in a store looks at its state this often */

enum view_kind { VIEW_NONE = 0, VIEW_INLINE = 1, VIEW_STORE = 2 };

/*
 * A ferry_get asleep on one pending object of ours, woken by that object alone: with one
 * condvar for all, every reply woke every thread asleep in a get, and N threads getting their
 * own tasks' results took turns on the lock at each one (multi_client_tasks_async). The rest
 * (ferry_wait, shutdown) still use ferry__rt.cond, broadcast only while someone waits on it.
 */
struct getter {
	struct getter *next;		 /* getters */
	const struct ferry__rt_obj *obj; /* what it waits for */
	pthread_cond_t cond;		 /* signalled when obj is ready, or at shutdown */
};

static struct getter *getters; /* under ferry__rt.lock */
static unsigned cond_waiters;  /* threads in a wait on ferry__rt.cond (under the lock) */

/* Lock held: wake the getters of @o (NULL: all of them, the runtime is going). */
static void wake_getters(const struct ferry__rt_obj *o)
{
	for (struct getter *g = getters; g; g = g->next)
		if (!o || g->obj == o)
			pthread_cond_signal(&g->cond);
}

void ferry__rt_objects_wake_all(void)
{
	wake_getters(NULL);
	pthread_cond_broadcast(&ferry__rt.cond);
}

bool ferry__rt_is_self(const struct ferry_worker_id *owner)
{
	return ferry_worker_id_eq(owner, &ferry__rt.self);
}

struct ferry__rt_obj *ferry__rt_obj_find(const struct ferry_object_id *id)
{
	struct ferry__rt_obj **slot = ferry__hashmap_get(&ferry__rt.objects, id);

	return slot ? *slot : NULL;
}

struct ferry__rt_obj *ferry__rt_obj_add(const struct ferry_object_id *id, uint8_t state)
{
	struct ferry__rt_obj *o = ferry__calloc(1, sizeof(*o));
	void *slot;
	int ret;

	if (!o)
		return NULL;
	ret = ferry__hashmap_put(&ferry__rt.objects, id, &slot);
	if (ret <= 0) { /* -ENOMEM, or 0: the id is taken (never, ids are unique per process) */
		ferry__free(o);
		return NULL;
	}
	o->id = *id;
	o->refs = 1;
	o->state = state;
	*(struct ferry__rt_obj **)slot = o;
	return o;
}

static void obj_free(struct ferry__rt_obj *o)
{
	if (o->lineage)
		ferry__rt_lineage_drop(o);
	while (o->cbs) {
		struct ferry__rt_cb *cb = o->cbs;

		o->cbs = cb->next;
		ferry__free(cb);
	}
	ferry__free(o->data);
	ferry__free(o->error);
	ferry__free(o->contained);
	ferry__free(o);
}

/* The last count is gone: out of the table, out of the store; the bytes stay while viewed. */
static void obj_forget(struct ferry__rt_obj *o)
{
	ferry__hashmap_remove(&ferry__rt.objects, &o->id, NULL);
	if (o->state == FERRY__RT_IN_STORE && ferry__rt.store) {
		(void)ferry_plasma_client_delete(ferry__rt.store, &o->id, 1, NULL);
		ferry__rt_free_queue(&o->id); /* the other nodes' copies */
	}
	/* The objects whose refs it held (ferry_put_refs) lose its count. */
	for (size_t i = 0; i < o->ncontained; i++) {
		struct ferry__rt_obj *c = ferry__rt_obj_find(&o->contained[i]);

		if (c)
			ferry__rt_obj_unref(c);
	}
	o->ncontained = 0;
	if (!o->pins)
		obj_free(o);
}

void ferry__rt_obj_unref(struct ferry__rt_obj *o)
{
	if (--o->refs > 0)
		return;
	obj_forget(o);
}

void ferry__rt_obj_ready(struct ferry__rt_obj *o, uint8_t state, void *data, size_t len, int status,
			 const char *error)
{
	o->state = state;
	o->data = data;
	o->len = len;
	o->status = status;
	if (error) {
		size_t n = strlen(error) + 1;

		o->error = ferry__malloc(n);
		if (o->error)
			memcpy(o->error, error, n);
	}
	wake_getters(o);
	if (cond_waiters)
		pthread_cond_broadcast(&ferry__rt.cond);
	ferry__rt_completion_fire(o, state == FERRY__RT_ERROR ? status : 0);
	ferry__rt_sub_object_ready();
	ferry__rt_owner_srv_ready();
}

void ferry__rt_objects_clear(void)
{
	size_t cursor = 0;
	void *key, *value;

	ferry__rt_lineage_clear();
	while (ferry__hashmap_next(&ferry__rt.objects, &cursor, &key, &value)) {
		struct ferry__rt_obj *o = *(struct ferry__rt_obj **)value;

		if (o->state == FERRY__RT_IN_STORE && ferry__rt.store)
			(void)ferry_plasma_client_delete(ferry__rt.store, &o->id, 1, NULL);
		/* A view still pinned keeps its bytes: the caller releases it later. */
		o->refs = 0;
		if (!o->pins)
			obj_free(o);
	}
	ferry__hashmap_fini(&ferry__rt.objects);
	ferry__hashmap_init(&ferry__rt.objects, sizeof(struct ferry_object_id), sizeof(void *));
	ferry__rt_free_fini();
}

void ferry__rt_objects_free_held(void)
{
	size_t cursor = 0;
	void *key, *value;

	while (ferry__hashmap_next(&ferry__rt.objects, &cursor, &key, &value)) {
		struct ferry__rt_obj *o = *(struct ferry__rt_obj **)value;

		if (o->state == FERRY__RT_IN_STORE)
			ferry__rt_free_queue(&o->id);
	}
}

/* The next put's id and the store, or -ENOTCONN. */
static int next_put_id(struct ferry_object_id *id)
{
	uint32_t seq;

	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		pthread_mutex_unlock(&ferry__rt.lock);
		return -ENOTCONN;
	}
	seq = ++ferry__rt.put_seq;
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry_object_id_for_put(&ferry__rt.root_task, seq, id);
	return 0;
}

/* Record a new object of ours (count 1) and hand out its ref; on -ENOMEM undo the store's. */
static int own_new(const struct ferry_object_id *id, size_t len, struct ferry_ref *out)
{
	struct ferry__rt_obj *o;

	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_add(id, FERRY__RT_IN_STORE);
	if (o) { /* in this node's store: where tasks taking it would rather run */
		o->node = ferry__rt.node;
		o->store_bytes = len;
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (!o) {
		(void)ferry_plasma_client_delete(ferry__rt.store, id, 1, NULL);
		return -ENOMEM;
	}
	out->id = *id;
	out->owner = ferry__rt.self;
	return 0;
}

int ferry_put(const void *data, size_t len, struct ferry_ref *out)
{
	struct ferry_object_id id;
	int ret;

	if ((!data && len) || !out)
		return -EINVAL;
	ret = next_put_id(&id);
	if (ret < 0)
		return ret;
	ret = ferry_plasma_client_put_owned(ferry__rt.store, &id, data, len, NULL, 0, 0, NULL);
	if (ret < 0) {
		FLOG_WARN(COMP, "put of %zu bytes: %s", len, ferry_strerror(ret));
		return ret;
	}
	return own_new(&id, len, out);
}

/* Lock held: whether every one of @refs is an object of ours still counted. */
static bool own_all(const struct ferry_ref *refs, size_t nrefs)
{
	for (size_t i = 0; i < nrefs; i++)
		if (!ferry__rt_is_self(&refs[i].owner) || !ferry__rt_obj_find(&refs[i].id))
			return false;
	return true;
}

int ferry_put_refs(const void *data, size_t len, const struct ferry_ref *refs, size_t nrefs,
		   struct ferry_ref *out)
{
	struct ferry_object_id *ids = nrefs ? ferry__calloc(nrefs, sizeof(*ids)) : NULL;
	struct ferry__rt_obj *o;
	bool ok;
	int ret;

	if ((nrefs && !refs) || !out)
		ret = -EINVAL;
	else if (nrefs && !ids)
		ret = -ENOMEM;
	else
		ret = ferry_put(data, len, out);
	if (ret < 0) {
		ferry__free(ids);
		return ret;
	}
	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_find(&out->id);
	ok = o && own_all(refs, nrefs);
	for (size_t i = 0; ok && i < nrefs; i++) {
		struct ferry__rt_obj *c = ferry__rt_obj_find(&refs[i].id);

		ids[i] = refs[i].id;
		if (c) /* always: own_all() found each */
			c->refs++;
	}
	if (ok) {
		o->contained = ids;
		o->ncontained = nrefs;
	} else if (o) {
		ferry__rt_obj_unref(o); /* not a valid container: it goes again */
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ok)
		return 0;
	ferry__free(ids);
	memset(out, 0, sizeof(*out));
	FLOG_WARN(COMP, "ferry_put_refs: a ref that is not this process's own, or dropped");
	return -EINVAL;
}

int ferry_create(size_t len, void **buf, struct ferry_ref *out)
{
	struct ferry__rt_obj *o;
	struct ferry_object_id id;
	int ret;

	if (!buf || !out)
		return -EINVAL;
	ret = next_put_id(&id);
	if (ret < 0)
		return ret;
	ret = ferry_plasma_client_create_owned(ferry__rt.store, &id, len, NULL, 0, 0, NULL, buf);
	if (ret < 0) {
		FLOG_WARN(COMP, "create of %zu bytes: %s", len, ferry_strerror(ret));
		return ret;
	}
	/* Pending until sealed: a get meanwhile waits, as for a task's return. */
	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_add(&id, FERRY__RT_PENDING);
	if (o) {
		o->node = ferry__rt.node;
		o->store_bytes = len;
	}
	ret = o ? 0 : -ENOMEM;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ret < 0) {
		(void)ferry_plasma_client_abort(ferry__rt.store, &id);
		return ret;
	}
	out->id = id;
	out->owner = ferry__rt.self;
	return 0;
}

int ferry_seal(const struct ferry_ref *ref)
{
	struct ferry__rt_obj *o;
	int ret;

	if (!ref || !ferry__rt_is_self(&ref->owner))
		return -EINVAL;
	if (!ferry__rt.up)
		return -ENOTCONN;
	ret = ferry_plasma_client_seal(ferry__rt.store, &ref->id);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_find(&ref->id);
	if (o && o->state == FERRY__RT_PENDING)
		ferry__rt_obj_ready(o, FERRY__RT_IN_STORE, NULL, 0, 0, NULL);
	pthread_mutex_unlock(&ferry__rt.lock);
	return 0;
}

int ferry_ref_dup(const struct ferry_ref *ref, struct ferry_ref *out)
{
	struct ferry__rt_obj *o;
	int ret = 0;

	if (!ref || !out)
		return -EINVAL;
	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		ret = -ENOTCONN;
	} else if (ferry__rt_is_self(&ref->owner)) {
		o = ferry__rt_obj_find(&ref->id);
		if (o)
			o->refs++;
		else
			ret = -ENOENT;
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	/* Another owner's: the count is taken there, so that it keeps the object alive. */
	if (ret == 0 && !ferry__rt_is_self(&ref->owner))
		ret = ferry__rt_borrow_update(ref, 1);
	if (ret == 0)
		*out = *ref;
	return ret;
}

void ferry_ref_drop(struct ferry_ref *ref)
{
	struct ferry__rt_obj *o;

	if (!ref)
		return;
	pthread_mutex_lock(&ferry__rt.lock);
	if (ferry__rt.up && ferry__rt_is_self(&ref->owner)) {
		o = ferry__rt_obj_find(&ref->id);
		if (o)
			ferry__rt_obj_unref(o);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ferry__rt.up && !ferry__rt_is_self(&ref->owner) &&
	    !ferry_id_is_nil(ref->owner.bytes, sizeof(ref->owner.bytes)))
		(void)ferry__rt_borrow_update(ref, -1); /* 0 when it took no count there */
	memset(ref, 0, sizeof(*ref));
}

/* ms left until @deadline_ms (< 0: none: -1), at least 0. */
static int64_t left_ms(int64_t deadline_ms)
{
	int64_t now = (int64_t)ferry__loop_now_ms();

	if (deadline_ms < 0)
		return -1;
	return deadline_ms > now ? deadline_ms - now : 0;
}

/* Wait on @cond until @deadline_ms (< 0: forever) or @cap_ms (< 0: none); lock held.
 * Returns -ETIMEDOUT once the deadline passed. */
static int wait_on_until(pthread_cond_t *cond, int64_t deadline_ms, int64_t cap_ms)
{
	int64_t left = left_ms(deadline_ms);

	if (left == 0)
		return -ETIMEDOUT;
	if (cap_ms >= 0 && (left < 0 || left > cap_ms))
		left = cap_ms;
	if (left < 0) {
		pthread_cond_wait(cond, &ferry__rt.lock);
	} else {
		struct timespec ts = ferry__deadline_in_us((uint64_t)left * 1000u);

		pthread_cond_timedwait(cond, &ferry__rt.lock, &ts);
	}
	return 0;
}

/* The same on ferry__rt.cond, counted: an object's ready broadcasts it only while waited on. */
static int cond_wait_until(int64_t deadline_ms, int64_t cap_ms)
{
	int ret;

	cond_waiters++;
	ret = wait_on_until(&ferry__rt.cond, deadline_ms, cap_ms);
	cond_waiters--;
	return ret;
}

/* Lock held: wait until @o is not pending, the runtime goes down (-ECANCELED) or
 * @deadline_ms. */
static int wait_object(struct ferry__rt_obj *o, int64_t deadline_ms)
{
	struct getter g = {.next = getters, .obj = o}, **pp;
	int ret = 0;

	if (o->state != FERRY__RT_PENDING)
		return 0;
	ferry__cond_init_monotonic(&g.cond);
	getters = &g;
	while (o->state == FERRY__RT_PENDING && ret == 0)
		ret = ferry__rt.up ? wait_on_until(&g.cond, deadline_ms, -1) : -ECANCELED;
	for (pp = &getters; *pp != &g; pp = &(*pp)->next)
		;
	*pp = g.next;
	pthread_cond_destroy(&g.cond);
	return ret;
}

static int64_t deadline_of(int64_t timeout_ms)
{
	return timeout_ms < 0 ? -1 : (int64_t)ferry__loop_now_ms() + timeout_ms;
}

/* A view of a sealed object in the store, waiting up to @deadline_ms. */
static int get_store(const struct ferry_object_id *id, int64_t wait_ms, struct ferry_view *out)
{
	struct ferry_plasma_view *pv = ferry__calloc(1, sizeof(*pv));
	int ret;

	if (!pv)
		return -ENOMEM;
	ret = ferry_plasma_client_get(ferry__rt.store, id, 1, wait_ms, pv);
	if (ret == 0 && pv->status < 0)
		ret = pv->status;
	if (ret < 0) {
		ferry__free(pv);
		return ret;
	}
	out->data = pv->data;
	out->len = pv->data_size;
	out->priv[0] = (uint64_t)(uintptr_t)pv;
	out->priv[1] = VIEW_STORE;
	return 0;
}

/* Our own object: wait while pending, then view it (lock taken here). A get of one in a
 * store waits there in slices: when the node with its only copy dies, lineage.c makes it
 * pending again, and the get then waits for the value made anew instead of a pull that
 * cannot come. */
static int get_owned(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out)
{
	struct ferry__rt_obj *o;
	bool blocked, viewed = false;
	int ret = 0;

	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_find(&ref->id);
	if (!o) {
		pthread_mutex_unlock(&ferry__rt.lock);
		return -ENOENT; /* every count on it was dropped */
	}
	o->refs++; /* held across the wait: a drop meanwhile cannot free it under us */
	for (;;) {
		int64_t left;

		blocked = o->state == FERRY__RT_PENDING && ferry__rt_block();
		ret = wait_object(o, deadline_ms);
		ferry__rt_unblock(blocked);
		if (ret < 0 || o->state != FERRY__RT_IN_STORE)
			break;
		left = left_ms(deadline_ms);
		pthread_mutex_unlock(&ferry__rt.lock);
		ret = get_store(&ref->id, left < 0 || left > STORE_SLICE_MS ? STORE_SLICE_MS : left,
				out);
		pthread_mutex_lock(&ferry__rt.lock);
		viewed = ret == 0;
		if (ret != -ETIMEDOUT || left_ms(deadline_ms) == 0)
			break;
	}
	if (ret == 0 && !viewed && o->state == FERRY__RT_INLINE) {
		o->pins++;
		out->data = o->data;
		out->len = o->len;
		out->priv[0] = (uint64_t)(uintptr_t)o;
		out->priv[1] = VIEW_INLINE;
	} else if (ret == 0 && !viewed && o->state == FERRY__RT_ERROR) {
		ret = o->status;
		snprintf(out->error, sizeof(out->error), "%s",
			 o->error ? o->error : ferry_strerror(o->status));
	}
	ferry__rt_obj_unref(o);
	pthread_mutex_unlock(&ferry__rt.lock);
	return ret;
}

/* Has the GCS seen @owner die? */
static bool owner_dead(const struct ferry_worker_id *owner)
{
	struct ferry_gcs_worker_info *w = NULL;
	bool dead = false;
	int n = ferry_gcs_worker_list(ferry__rt.gcs, &w);

	for (int i = 0; i < n; i++)
		if (ferry_worker_id_eq(&w[i].id, owner))
			dead = w[i].state == FERRY_GCS_WORKER_DEAD;
	ferry_gcs_free(w);
	return dead;
}

/* Another owner's object: it shows up in the store, unless its owner died. */
static int wait_foreign(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out)
{
	for (;;) {
		int64_t left = left_ms(deadline_ms);
		int64_t slice = left < 0 || left > OWNER_CHECK_MS ? OWNER_CHECK_MS : left;
		int ret = get_store(&ref->id, slice, out);

		if (ret != -ETIMEDOUT)
			return ret;
		if (owner_dead(&ref->owner)) {
			char hex[FERRY_ID_HEX_MAX];

			ferry_worker_id_to_hex(&ref->owner, hex, sizeof(hex));
			snprintf(out->error, sizeof(out->error),
				 "the owner of the object (%s) died", hex);
			return -EOWNERDEAD;
		}
		if (left_ms(deadline_ms) == 0)
			return -ETIMEDOUT;
	}
}

/* Not in the store yet: its owner says where it is (or sends its bytes), waiting while it is
 * pending. An owner with no socket on this host is on another (or ended): the store then
 * brings the object, unless the GCS says its owner died. */
static int ask_owner(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out)
{
	int ret = ferry__rt_borrow_get(ref, deadline_ms, out);

	if (ret == 1)
		return get_store(&ref->id, left_ms(deadline_ms), out);
	if (ret == -ENOENT && !out->error[0])
		return ferry__rt.gcs ? wait_foreign(ref, deadline_ms, out) : -EOWNERDEAD;
	return ret;
}

static int get_foreign(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out)
{
	int ret = get_store(&ref->id, 0, out);
	bool blocked;

	if (ret != -ETIMEDOUT)
		return ret;
	pthread_mutex_lock(&ferry__rt.lock);
	blocked = ferry__rt_block();
	pthread_mutex_unlock(&ferry__rt.lock);
	ret = ask_owner(ref, deadline_ms, out);
	if (ret == -EOWNERDEAD && !out->error[0]) {
		char hex[FERRY_ID_HEX_MAX];

		ferry_worker_id_to_hex(&ref->owner, hex, sizeof(hex));
		snprintf(out->error, sizeof(out->error), "the owner of the object (%s) died", hex);
	}
	pthread_mutex_lock(&ferry__rt.lock);
	ferry__rt_unblock(blocked);
	pthread_mutex_unlock(&ferry__rt.lock);
	return ret;
}

int ferry_get(const struct ferry_ref *ref, int64_t timeout_ms, struct ferry_view *out)
{
	int64_t deadline_ms = deadline_of(timeout_ms);

	if (!ref || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!ferry__rt.up)
		return -ENOTCONN;
	if (ferry__rt_is_self(&ref->owner))
		return get_owned(ref, deadline_ms, out);
	return get_foreign(ref, deadline_ms, out);
}

void ferry_release(struct ferry_view *view)
{
	if (!view)
		return;
	if (view->priv[1] == VIEW_INLINE) {
		struct ferry__rt_obj *o = (struct ferry__rt_obj *)(uintptr_t)view->priv[0];

		pthread_mutex_lock(&ferry__rt.lock);
		if (--o->pins == 0 && o->refs == 0)
			obj_free(o); /* dropped while viewed: out of the table already */
		pthread_mutex_unlock(&ferry__rt.lock);
	} else if (view->priv[1] == FERRY__RT_VIEW_COPY) {
		ferry__free((void *)(uintptr_t)view->priv[0]); /* bytes an owner sent */
	} else if (view->priv[1] == VIEW_STORE) {
		struct ferry_plasma_view *pv = (struct ferry_plasma_view *)(uintptr_t)view->priv[0];

		if (ferry__rt.store)
			(void)ferry_plasma_client_release(ferry__rt.store, pv);
		ferry__free(pv);
	}
	memset(view->priv, 0, sizeof(view->priv));
	view->data = NULL;
	view->len = 0;
}

/* Lock held. 1 ready, 0 not; *@foreign set when it had to ask the store. */
static int ref_ready(const struct ferry_ref *ref, bool *foreign)
{
	struct ferry__rt_obj *o;

	if (ferry__rt_is_self(&ref->owner)) {
		o = ferry__rt_obj_find(&ref->id);
		return !o || o->state != FERRY__RT_PENDING; /* a dropped one: get says -ENOENT */
	}
	*foreign = true;
	return ferry_plasma_client_contains(ferry__rt.store, &ref->id) == 1;
}

/* Lock held (dropped meanwhile): wait up to @cap_ms (or @deadline_ms) for answers of the
 * owners @w asked. -ETIMEDOUT once the deadline passed. */
static int watch_wait(struct ferry__rt_borrow_watch *w, int64_t deadline_ms, int cap_ms)
{
	int64_t left = left_ms(deadline_ms);

	if (left == 0)
		return -ETIMEDOUT;
	pthread_mutex_unlock(&ferry__rt.lock);
	(void)ferry__rt_borrow_watch_poll(w, left < 0 || left > cap_ms ? cap_ms : (int)left,
					  deadline_ms);
	pthread_mutex_lock(&ferry__rt.lock);
	return 0;
}

/* A wait's first look at the owners @w asked: FIRST_ANSWER_MS for ready ones to answer (a
 * reply begun is read to the wait's @deadline_ms, or to that time's end if later). */
static void first_answers(struct ferry__rt_borrow_watch *w, int64_t deadline_ms)
{
	int64_t end = (int64_t)ferry__loop_now_ms() + FIRST_ANSWER_MS, left;
	int64_t read_by = deadline_ms < 0 || deadline_ms > end ? deadline_ms : end;

	while (w && (left = end - (int64_t)ferry__loop_now_ms()) > 0 &&
	       ferry__rt_borrow_watch_poll(w, (int)left, read_by) > 0)
		;
}

int ferry_wait(const struct ferry_ref *refs, size_t n, size_t num_ready, int64_t timeout_ms,
	       int *ready)
{
	int64_t deadline_ms = deadline_of(timeout_ms);
	struct ferry__rt_borrow_watch *watch = NULL;
	bool blocked = false, watched = false;
	size_t count;

	if ((n && (!refs || !ready)) || num_ready > n)
		return -EINVAL;
	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		pthread_mutex_unlock(&ferry__rt.lock);
		return -ENOTCONN;
	}
	for (;;) {
		bool foreign = false;

		count = 0;
		for (size_t i = 0; i < n; i++) {
			ready[i] = ref_ready(&refs[i], &foreign) ||
				   ferry__rt_borrow_watch_answered(watch, i);
			count += (size_t)ready[i];
		}
		if (count >= num_ready)
			break;
		if (foreign && !watched) {
			/* Other owners' objects not in the store: ask their owners once, and
			 * give a wait of 0 the time of one answer (a ready one comes at once). */
			watched = true;
			pthread_mutex_unlock(&ferry__rt.lock);
			watch = ferry__rt_borrow_watch_start(refs, n, ready);
			first_answers(watch, deadline_ms);
			pthread_mutex_lock(&ferry__rt.lock);
			continue;
		}
		if (!blocked && timeout_ms != 0)
			blocked = ferry__rt_block();
		/* Own objects signal the condvar; the store and the owners are looked at every
		 * FOREIGN_POLL_MS. */
		if (watch ? watch_wait(watch, deadline_ms, FOREIGN_POLL_MS) < 0
			  : cond_wait_until(deadline_ms, foreign ? FOREIGN_POLL_MS : -1) < 0)
			break;
	}
	ferry__rt_unblock(blocked);
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry__rt_borrow_watch_end(watch);
	return (int)count;
}
