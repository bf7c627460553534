/* SPDX-License-Identifier: Apache-2.0 */
/* Object directory: entries, locations, owner and node indexes, death cascades. */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/objdir.h"

/*
 * The object map's key: the ID padded to 24 bytes. The hash map stores each value right after
 * its key, so a 20-byte key would leave the entry pointer misaligned.
 */
struct okey {
	struct ferry_object_id id; /* the object */
	uint8_t pad[4];		   /* zero */
};

static struct okey okey_of(const struct ferry_object_id *id)
{
	struct okey k;

	k.id = *id;
	memset(k.pad, 0, sizeof(k.pad));
	return k;
}

struct ferry__objdir {
	struct ferry__objdir_opts opts;	   /* shard, change callback */
	struct ferry__hashmap objects;	   /* struct okey -> struct ferry__objdir_entry * */
	struct ferry__hashmap by_owner;	   /* worker ID -> head of owner_link list */
	struct ferry__hashmap by_onode;	   /* node ID -> head of onode_link list */
	struct ferry__hashmap by_loc_node; /* node ID -> head of loc node_link list */
};

int ferry__objdir_create(const struct ferry__objdir_opts *opts, struct ferry__objdir **out)
{
	struct ferry__objdir *od = ferry__calloc(1, sizeof(*od));

	if (!od)
		return -ENOMEM;
	if (opts)
		od->opts = *opts;
	if (od->opts.shard_count == 0)
		od->opts.shard_count = 1;
	if (od->opts.shard_index >= od->opts.shard_count) {
		FLOG_ERROR("gcs", "objdir: shard %u of %u does not exist", od->opts.shard_index,
			   od->opts.shard_count);
		ferry__free(od);
		return -EINVAL;
	}
	ferry__hashmap_init(&od->objects, sizeof(struct okey), sizeof(void *));
	ferry__hashmap_init(&od->by_owner, sizeof(struct ferry_worker_id), sizeof(void *));
	ferry__hashmap_init(&od->by_onode, sizeof(struct ferry_node_id), sizeof(void *));
	ferry__hashmap_init(&od->by_loc_node, sizeof(struct ferry_node_id), sizeof(void *));
	*out = od;
	return 0;
}

static void free_entry(struct ferry__objdir_entry *e)
{
	struct ferry__objdir_loc *loc, *next;

	for (loc = e->locations; loc; loc = next) {
		next = loc->obj_next;
		ferry__free(loc);
	}
	ferry__free(e->spill_url);
	ferry__free(e);
}

void ferry__objdir_destroy(struct ferry__objdir *od)
{
	size_t cursor = 0;
	void *key, *value;

	if (!od)
		return;
	while (ferry__hashmap_next(&od->objects, &cursor, &key, &value))
		free_entry(*(struct ferry__objdir_entry **)value);
	ferry__hashmap_fini(&od->objects);
	ferry__hashmap_fini(&od->by_owner);
	ferry__hashmap_fini(&od->by_onode);
	ferry__hashmap_fini(&od->by_loc_node);
	ferry__free(od);
}

void ferry__objdir_set_changed(struct ferry__objdir *od, ferry__objdir_changed_fn fn, void *arg)
{
	od->opts.changed = fn;
	od->opts.arg = arg;
}

static void notify(struct ferry__objdir *od, const struct ferry__objdir_entry *e, bool removed)
{
	if (od->opts.changed)
		od->opts.changed(od->opts.arg, e, removed);
}

/* Push @l on the list whose head is stored under @key in @m. 0 or -ENOMEM (nothing changed). */
static int index_add(struct ferry__hashmap *m, const void *key, struct ferry__objdir_link *l)
{
	struct ferry__objdir_link **head;
	int ret = ferry__hashmap_put(m, key, (void **)&head);

	if (ret < 0)
		return ret;
	l->prev = NULL;
	l->next = ret ? NULL : *head;
	if (l->next)
		l->next->prev = l;
	*head = l;
	return 0;
}

static void index_del(struct ferry__hashmap *m, const void *key, struct ferry__objdir_link *l)
{
	struct ferry__objdir_link **head;

	if (l->next)
		l->next->prev = l->prev;
	if (l->prev) {
		l->prev->next = l->next;
		return;
	}
	if (l->next) {
		head = ferry__hashmap_get(m, key);
		*head = l->next;
		return;
	}
	ferry__hashmap_remove(m, key, NULL);
}

static struct ferry__objdir_entry *lookup(const struct ferry__objdir *od,
					  const struct ferry_object_id *id)
{
	struct okey k = okey_of(id);
	struct ferry__objdir_entry **slot = ferry__hashmap_get(&od->objects, &k);

	return slot ? *slot : NULL;
}

static int check_info(const struct ferry__objdir *od, const struct ferry__objdir_info *info)
{
	char hex[FERRY_ID_HEX_MAX];

	ferry_object_id_to_hex(&info->id, hex, sizeof(hex));
	if (ferry_gcs_object_shard(&info->id, od->opts.shard_count) != od->opts.shard_index) {
		FLOG_WARN("gcs", "objdir: object %s belongs to shard %u, this is shard %u of %u",
			  hex, ferry_gcs_object_shard(&info->id, od->opts.shard_count),
			  od->opts.shard_index, od->opts.shard_count);
		return -EXDEV;
	}
	if (ferry_id_is_nil(info->owner_worker.bytes, sizeof(info->owner_worker.bytes)) ||
	    info->nlocations > FERRY__OBJDIR_MAX_LOCATIONS ||
	    (info->spill_url && strlen(info->spill_url) > FERRY__OBJDIR_MAX_URL) ||
	    (info->nlocations && !info->locations)) {
		FLOG_WARN("gcs", "objdir: object %s: nil owner, too many locations or bad URL",
			  hex);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < info->nlocations; i++) {
		for (uint32_t j = 0; j < i; j++) {
			if (ferry_node_id_eq(&info->locations[i], &info->locations[j])) {
				FLOG_WARN("gcs", "objdir: object %s: a location twice", hex);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* A place says something only with its placement id: alloc 0 is unknown, whatever the rest. */
static bool place_known(const struct ferry_gcs_object_place *p)
{
	return p->alloc != 0;
}

static struct ferry__objdir_entry *build(const struct ferry__objdir_info *info)
{
	struct ferry__objdir_entry *e = ferry__calloc(1, sizeof(*e));
	struct ferry__objdir_loc **tail;

	if (!e)
		return NULL;
	e->id = info->id;
	e->owner_worker = info->owner_worker;
	e->owner_node = info->owner_node;
	e->size_bytes = info->size_bytes;
	e->metadata_bytes = info->metadata_bytes;
	if (info->spill_url && info->spill_url[0]) {
		e->spill_url = ferry__strdup(info->spill_url);
		if (!e->spill_url)
			goto err_free;
	}
	tail = &e->locations;
	for (uint32_t i = 0; i < info->nlocations; i++) {
		struct ferry__objdir_loc *loc = ferry__calloc(1, sizeof(*loc));

		if (!loc)
			goto err_free;
		loc->node = info->locations[i];
		if (info->places && place_known(&info->places[i]))
			loc->place = info->places[i];
		loc->obj = e;
		*tail = loc;
		tail = &loc->obj_next;
		e->nlocations++;
	}
	return e;

err_free:
	free_entry(e);
	return NULL;
}

/* Enter @e in the object map and every index; on -ENOMEM undo what was done. */
static int attach(struct ferry__objdir *od, struct ferry__objdir_entry *e)
{
	struct ferry__objdir_entry **slot;
	struct ferry__objdir_loc *loc, *failed;
	struct okey k = okey_of(&e->id);
	int ret = ferry__hashmap_put(&od->objects, &k, (void **)&slot);

	if (ret < 0)
		return ret;
	*slot = e;
	ret = index_add(&od->by_owner, &e->owner_worker, &e->owner_link);
	if (ret < 0)
		goto err_remove_object;
	ret = index_add(&od->by_onode, &e->owner_node, &e->onode_link);
	if (ret < 0)
		goto err_unindex_owner;
	for (loc = e->locations; loc; loc = loc->obj_next) {
		ret = index_add(&od->by_loc_node, &loc->node, &loc->node_link);
		if (ret < 0)
			goto err_unindex_locations;
	}
	return 0;

err_unindex_locations:
	failed = loc;
	for (loc = e->locations; loc != failed; loc = loc->obj_next)
		index_del(&od->by_loc_node, &loc->node, &loc->node_link);
	index_del(&od->by_onode, &e->owner_node, &e->onode_link);
err_unindex_owner:
	index_del(&od->by_owner, &e->owner_worker, &e->owner_link);
err_remove_object:
	ferry__hashmap_remove(&od->objects, &k, NULL);
	return ret;
}

static void detach(struct ferry__objdir *od, struct ferry__objdir_entry *e)
{
	struct okey k = okey_of(&e->id);

	for (struct ferry__objdir_loc *loc = e->locations; loc; loc = loc->obj_next)
		index_del(&od->by_loc_node, &loc->node, &loc->node_link);
	index_del(&od->by_onode, &e->owner_node, &e->onode_link);
	index_del(&od->by_owner, &e->owner_worker, &e->owner_link);
	ferry__hashmap_remove(&od->objects, &k, NULL);
}

static int insert(struct ferry__objdir *od, const struct ferry__objdir_info *info, bool restore)
{
	struct ferry__objdir_entry *e;
	int ret = check_info(od, info);

	if (ret < 0)
		return ret;
	if (restore &&
	    (info->state < FERRY_GCS_OBJECT_PENDING || info->state > FERRY_GCS_OBJECT_LOST)) {
		FLOG_WARN("gcs", "objdir: restore with unknown state %d", (int)info->state);
		return -EINVAL;
	}
	if (lookup(od, &info->id))
		return -EEXIST;
	e = build(info);
	if (!e)
		return -ENOMEM;
	if (restore) {
		e->state = info->state;
		e->owner_dead = info->owner_dead;
	} else {
		e->state = e->nlocations || e->spill_url ? FERRY_GCS_OBJECT_AVAILABLE
							 : FERRY_GCS_OBJECT_PENDING;
	}
	ret = attach(od, e);
	if (ret < 0) {
		free_entry(e);
		return ret;
	}
	notify(od, e, false);
	return 1;
}

int ferry__objdir_add(struct ferry__objdir *od, const struct ferry__objdir_info *info)
{
	return insert(od, info, false);
}

int ferry__objdir_restore(struct ferry__objdir *od, const struct ferry__objdir_info *info)
{
	return insert(od, info, true);
}

static struct ferry__objdir_entry *find(const struct ferry__objdir *od,
					const struct ferry_object_id *id, const char *what)
{
	struct ferry__objdir_entry *e = lookup(od, id);
	char hex[FERRY_ID_HEX_MAX];

	if (!e) {
		ferry_object_id_to_hex(id, hex, sizeof(hex));
		FLOG_DEBUG("gcs", "objdir: %s: no object %s", what, hex);
	}
	return e;
}

static bool place_eq(const struct ferry_gcs_object_place *a, const struct ferry_gcs_object_place *b)
{
	return a->offset == b->offset && a->alloc == b->alloc && a->check == b->check;
}

/* A copy already listed: take a known @place that differs in any field (0: nothing changed, 1:
 * changed). The check counts too: a reader verifies one-sided READs by it, so a check that
 * changes for the same allocation must reach subscribers like a move. */
static int update_place(struct ferry__objdir *od, struct ferry__objdir_loc *loc,
			const struct ferry_gcs_object_place *place)
{
	if (!place || !place_known(place) || place_eq(&loc->place, place))
		return 0;
	loc->place = *place;
	notify(od, loc->obj, false);
	return 1;
}

int ferry__objdir_add_location(struct ferry__objdir *od, const struct ferry_object_id *id,
			       const struct ferry_node_id *node, uint64_t size_bytes,
			       uint32_t metadata_bytes, const struct ferry_gcs_object_place *place)
{
	struct ferry__objdir_entry *e = find(od, id, "add location");
	struct ferry__objdir_loc *loc, **tail;
	int ret;

	if (!e)
		return -ENOENT;
	if (e->owner_dead)
		return -EOWNERDEAD;
	if (size_bytes && e->size_bytes && size_bytes != e->size_bytes) {
		FLOG_WARN("gcs", "objdir: location reports %llu bytes, object has %llu",
			  (unsigned long long)size_bytes, (unsigned long long)e->size_bytes);
		return -EINVAL;
	}
	for (tail = &e->locations; *tail; tail = &(*tail)->obj_next)
		if (ferry_node_id_eq(&(*tail)->node, node))
			return update_place(od, *tail, place);
	if (e->nlocations >= FERRY__OBJDIR_MAX_LOCATIONS)
		return -E2BIG;
	loc = ferry__calloc(1, sizeof(*loc));
	if (!loc)
		return -ENOMEM;
	loc->node = *node;
	if (place && place_known(place))
		loc->place = *place;
	loc->obj = e;
	ret = index_add(&od->by_loc_node, node, &loc->node_link);
	if (ret < 0) {
		ferry__free(loc);
		return ret;
	}
	*tail = loc;
	e->nlocations++;
	if (size_bytes) {
		e->size_bytes = size_bytes;
		e->metadata_bytes = metadata_bytes;
	}
	e->state = FERRY_GCS_OBJECT_AVAILABLE;
	notify(od, e, false);
	return 1;
}

/* The last copy went away: an available object with nothing left is lost. */
static void settle(struct ferry__objdir_entry *e)
{
	if (e->nlocations == 0 && !e->spill_url && e->state == FERRY_GCS_OBJECT_AVAILABLE)
		e->state = FERRY_GCS_OBJECT_LOST;
}

int ferry__objdir_remove_location(struct ferry__objdir *od, const struct ferry_object_id *id,
				  const struct ferry_node_id *node)
{
	struct ferry__objdir_entry *e = find(od, id, "remove location");
	struct ferry__objdir_loc **pp, *loc;

	if (!e)
		return -ENOENT;
	for (pp = &e->locations; *pp; pp = &(*pp)->obj_next)
		if (ferry_node_id_eq(&(*pp)->node, node))
			break;
	loc = *pp;
	if (!loc)
		return 0;
	*pp = loc->obj_next;
	index_del(&od->by_loc_node, node, &loc->node_link);
	ferry__free(loc);
	e->nlocations--;
	settle(e);
	notify(od, e, false);
	return 1;
}

int ferry__objdir_set_spilled(struct ferry__objdir *od, const struct ferry_object_id *id,
			      const char *url)
{
	struct ferry__objdir_entry *e = find(od, id, "set spilled");
	char *copy = NULL;

	if (!e)
		return -ENOENT;
	if (e->owner_dead)
		return -EOWNERDEAD;
	if (url && strlen(url) > FERRY__OBJDIR_MAX_URL) {
		FLOG_WARN("gcs", "objdir: spill URL of %zu bytes (limit %d)", strlen(url),
			  FERRY__OBJDIR_MAX_URL);
		return -E2BIG;
	}
	if (url && url[0]) {
		copy = ferry__strdup(url);
		if (!copy)
			return -ENOMEM;
	}
	ferry__free(e->spill_url);
	e->spill_url = copy;
	if (copy)
		e->state = FERRY_GCS_OBJECT_AVAILABLE;
	settle(e);
	notify(od, e, false);
	return 0;
}

int ferry__objdir_remove(struct ferry__objdir *od, const struct ferry_object_id *id)
{
	struct ferry__objdir_entry *e = find(od, id, "remove");

	if (!e)
		return -ENOENT;
	notify(od, e, true);
	detach(od, e);
	free_entry(e);
	return 0;
}

static void mark_owner_dead(struct ferry__objdir *od, struct ferry__objdir_entry *e, int *changed)
{
	if (e->owner_dead)
		return;
	e->owner_dead = true;
	e->state = FERRY_GCS_OBJECT_LOST;
	notify(od, e, false);
	(*changed)++;
}

int ferry__objdir_owner_died(struct ferry__objdir *od, const struct ferry_worker_id *owner)
{
	struct ferry__objdir_link **head = ferry__hashmap_get(&od->by_owner, owner);
	int changed = 0;

	for (struct ferry__objdir_link *l = head ? *head : NULL; l; l = l->next)
		mark_owner_dead(od, FERRY_CONTAINER_OF(l, struct ferry__objdir_entry, owner_link),
				&changed);
	return changed;
}

/* Drop @loc from its object's list (a node holds at most one copy of an object). */
static void drop_location(struct ferry__objdir_loc *loc)
{
	struct ferry__objdir_entry *e = loc->obj;
	struct ferry__objdir_loc **pp = &e->locations;

	while (*pp != loc)
		pp = &(*pp)->obj_next;
	*pp = loc->obj_next;
	e->nlocations--;
	settle(e);
	ferry__free(loc);
}

int ferry__objdir_node_died(struct ferry__objdir *od, const struct ferry_node_id *node)
{
	struct ferry__objdir_link **head = ferry__hashmap_get(&od->by_loc_node, node);
	struct ferry__objdir_link *l, *next;
	int changed = 0;

	for (l = head ? *head : NULL; l; l = next) {
		struct ferry__objdir_loc *loc =
			FERRY_CONTAINER_OF(l, struct ferry__objdir_loc, node_link);
		struct ferry__objdir_entry *e = loc->obj;

		next = l->next;
		drop_location(loc);
		notify(od, e, false);
		changed++;
	}
	if (head)
		ferry__hashmap_remove(&od->by_loc_node, node, NULL);
	head = ferry__hashmap_get(&od->by_onode, node);
	for (l = head ? *head : NULL; l; l = l->next)
		mark_owner_dead(od, FERRY_CONTAINER_OF(l, struct ferry__objdir_entry, onode_link),
				&changed);
	return changed;
}

const struct ferry__objdir_entry *ferry__objdir_get(const struct ferry__objdir *od,
						    const struct ferry_object_id *id)
{
	return lookup(od, id);
}

size_t ferry__objdir_count(const struct ferry__objdir *od)
{
	return ferry__hashmap_count(&od->objects);
}

const struct ferry__objdir_entry *ferry__objdir_next(const struct ferry__objdir *od, size_t *cursor)
{
	void *key, *value;

	if (!ferry__hashmap_next(&od->objects, cursor, &key, &value))
		return NULL;
	return *(struct ferry__objdir_entry **)value;
}
