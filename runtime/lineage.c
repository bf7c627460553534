/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lineage reconstruction (issue 24, Ray's): a task whose returns went to a store is kept, with
 * its arguments and the counts on them, as long as one of those returns is referenced (struct
 * ferry__rt_obj.lineage, counted in ferry__rt_task.lineage_refs). When a node dies, the returns
 * in its store are made pending again and their tasks submitted again: the same task ID, so the
 * same return IDs, each run spending one of the task's retries (max_retries bounds the
 * reconstructions; a task that ends with none left keeps no lineage: actor calls, max_retries
 * < 0; one that spent its last on a reconstruction fails its returns at the next death). A
 * get then waits for the new value. Arguments lost with the node are made again the same way
 * (they are returns in its store too); a task waits for them to be made before it is sent (as
 * at its first submit). A put has no lineage: ferry_put's objects live
 * in the owner's own node's store, and go with the owner.
 * A return with a copy elsewhere (pulled to our node's store, or listed on a live node by the
 * GCS's object directory) is not made again: it is read there. A get already waiting in the
 * store when the death comes waits there in slices (objects.c, get_owned): it sees the object
 * pending again and waits for the new value instead of its deadline.
 * Lock: ferry__rt.lock for the object table; the death comes on the loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"

void ferry__rt_lineage_attach(struct ferry__rt_task *t, struct ferry__rt_obj *o)
{
	/* No retries: it could not run again. A worker's runtime follows no deaths
	 * (node_watch.c): its lineage would only cost. */
	if (o->lineage || t->retries_left <= 0 || ferry__rt.worker)
		return;
	o->lineage = t;
	t->lineage_refs++;
}

void ferry__rt_lineage_detach(struct ferry__rt_task *t)
{
	for (uint32_t i = 0; i < t->num_returns && t->lineage_refs; i++) {
		struct ferry_object_id id;
		struct ferry__rt_obj *o;

		ferry_object_id_for_task(&t->id, i + 1, &id);
		o = ferry__rt_obj_find(&id);
		if (o && o->lineage == t) {
			o->lineage = NULL;
			t->lineage_refs--;
		}
	}
	t->lineage_refs = 0;
}

void ferry__rt_lineage_drop(struct ferry__rt_obj *o)
{
	struct ferry__rt_task *t = o->lineage;

	o->lineage = NULL;
	/* A task being made again is its queue's: its reply frees it (no return left to keep it). */
	if (--t->lineage_refs == 0 && !t->rerun)
		ferry__rt_task_free_locked(t);
}

void ferry__rt_lineage_clear(void)
{
	size_t cursor = 0;
	void *key, *value;

	/* Every object goes: the tasks' counts on their arguments go with them, not one by one
	 * (an unref would change the table under this walk). */
	while (ferry__hashmap_next(&ferry__rt.objects, &cursor, &key, &value)) {
		struct ferry__rt_obj *o = *(struct ferry__rt_obj **)value;
		struct ferry__rt_task *t = o->lineage;

		if (!t)
			continue;
		o->lineage = NULL;
		if (--t->lineage_refs || t->rerun)
			continue;
		for (size_t i = 0; i < t->nargs; i++)
			t->args[i].counted = false;
		ferry__rt_task_free_locked(t);
	}
}

/* Lock not held. Whether a sealed copy of @id lives on past the death of @dead: in our node's
 * store (a get pulled it here), or where the GCS's object directory lists one on a node not
 * known dead. *@at: that node. */
static bool copy_elsewhere(const struct ferry_object_id *id, const struct ferry_node_id *dead,
			   struct ferry_node_id *at)
{
	struct ferry_gcs_object_info info;
	bool found = false;

	if (ferry__rt.store && ferry_plasma_client_contains(ferry__rt.store, id) == 1) {
		*at = ferry__rt.node;
		return true;
	}
	/* Blocking, on the loop, once per lost object at a death: rare, and bounded by the
	 * client's deadline. */
	if (!ferry__rt.gcs || ferry_gcs_object_lookup(ferry__rt.gcs, id, &info) < 0)
		return false;
	for (uint32_t i = 0; i < info.nlocations && !found; i++)
		if (!ferry_node_id_eq(&info.locations[i], dead) &&
		    !ferry__rt_nodes_is_dead(&info.locations[i])) {
			*at = info.locations[i];
			found = true;
		}
	ferry_gcs_free(info.locations);
	return found;
}

void ferry__rt_lineage_node_dead(const struct ferry_node_id *node)
{
	struct ferry__rt_task *list = NULL, *t;
	struct ferry_object_id *ids = NULL;
	size_t cursor = 0, lost = 0, n = 0, cap = 0;
	void *key, *value;
	char hex[40], text[400];

	/* The returns that were there: their IDs first, looked up without the lock. */
	pthread_mutex_lock(&ferry__rt.lock);
	while (ferry__hashmap_next(&ferry__rt.objects, &cursor, &key, &value)) {
		struct ferry__rt_obj *o = *(struct ferry__rt_obj **)value;

		if (o->state != FERRY__RT_IN_STORE || !ferry_node_id_eq(&o->node, node) ||
		    !o->lineage)
			continue;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 16;
			void *p = ferry__realloc(ids, c * sizeof(*ids));

			if (!p)
				break; /* the rest are not made again: their gets wait for a pull */
			ids = p;
			cap = c;
		}
		ids[n++] = o->id;
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry_node_id_to_hex(node, hex, sizeof(hex));
	for (size_t i = 0; i < n; i++) {
		struct ferry_node_id at = {0};
		bool copy = copy_elsewhere(&ids[i], node, &at);
		struct ferry__rt_obj *o;

		pthread_mutex_lock(&ferry__rt.lock);
		o = ferry__rt_obj_find(&ids[i]);
		if (o && o->state == FERRY__RT_IN_STORE && ferry_node_id_eq(&o->node, node) &&
		    o->lineage) {
			if (copy) {
				o->node = at;
			} else {
				o->state = FERRY__RT_PENDING;
				lost++;
				t = o->lineage;
				if (!t->rerun) {
					t->rerun = true;
					t->next = list;
					list = t;
				}
			}
		}
		pthread_mutex_unlock(&ferry__rt.lock);
	}
	ferry__free(ids);
	if (lost)
		FLOG_WARN(COMP,
			  "node %s died with the only copy of %zu objects of ours: their "
			  "tasks run again",
			  hex, lost);
	while ((t = list)) {
		list = t->next;
		t->next = NULL;
		if (t->retries_left <= 0) { /* its retries went on earlier deaths */
			snprintf(text, sizeof(text),
				 "function %s: its return was lost with node %s and it has no "
				 "retries "
				 "left to make it again",
				 t->name, hex);
			ferry__rt_task_fail(t, -ENOENT, text);
			continue;
		}
		t->retries_left--;
		t->attempt++;
		/* After its own lost arguments: sent first, it could hold the only CPU while it
		 * waits for them. */
		ferry__rt_task_route(t);
	}
}
