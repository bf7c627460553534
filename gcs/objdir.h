/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object directory: ObjectID -> owner (worker and node), size, locations (node IDs),
 * spilled copy (URL) and state. Owners register objects, nodes add and remove locations, and
 * two cascades keep it honest: an owner's death marks its objects lost; a node's death drops
 * the locations on it and marks lost what has no copy left (and what a worker on it owned).
 *
 * Indexes make both cascades proportional to the objects involved, not to the directory: each
 * object is on its owner worker's list and its owner node's list, and each location is on its
 * node's list (intrusive lists whose heads live in hash maps).
 *
 * Sharding: with N shards, an object lives on shard ferry_gcs_object_shard(id, N) (include/
 * ferry/gcs.h); a directory built for shard i of N refuses other objects with -EXDEV.
 *
 * Thread model: not thread-safe; the GCS loop thread owns it. Entry pointers stay valid until
 * the entry is removed.
 */
#ifndef FERRY_GCS_OBJDIR_H
#define FERRY_GCS_OBJDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>

#define FERRY__OBJDIR_MAX_URL 4096	 /* longest spill URL */
#define FERRY__OBJDIR_MAX_LOCATIONS 4096 /* most copies of one object */

struct ferry__objdir_link {
	struct ferry__objdir_link *prev; /* previous on the same list, NULL at the head */
	struct ferry__objdir_link *next; /* next on the same list */
};

/* One copy of one object on one node. */
struct ferry__objdir_loc {
	struct ferry_node_id node;	     /* where the copy is */
	struct ferry_gcs_object_place place; /* where it lies in its node's store; all 0: unknown */
	struct ferry__objdir_entry *obj;     /* whose copy */
	struct ferry__objdir_loc *obj_next;  /* the object's next location (insertion order) */
	struct ferry__objdir_link node_link; /* on the node's list of locations */
};

struct ferry__objdir_entry {
	struct ferry_object_id id;	      /* the object */
	struct ferry_worker_id owner_worker;  /* owner (worker or driver) */
	struct ferry_node_id owner_node;      /* node the owner runs on */
	uint64_t size_bytes;		      /* object size, 0 = not known yet */
	uint32_t metadata_bytes;	      /* its metadata's size (known with size_bytes) */
	enum ferry_gcs_object_state state;    /* pending, available or lost */
	bool owner_dead;		      /* lost for good: the owner died */
	uint32_t nlocations;		      /* length of locations */
	struct ferry__objdir_loc *locations;  /* copies, oldest first */
	char *spill_url;		      /* spilled copy, or NULL */
	struct ferry__objdir_link owner_link; /* on the owner worker's list */
	struct ferry__objdir_link onode_link; /* on the owner node's list */
};

/* A flat description of an entry: what add/restore take and what snapshots carry. */
struct ferry__objdir_info {
	struct ferry_object_id id;	       /* the object */
	struct ferry_worker_id owner_worker;   /* owner */
	struct ferry_node_id owner_node;       /* owner's node */
	uint64_t size_bytes;		       /* size, 0 = unknown */
	uint32_t metadata_bytes;	       /* metadata size (meaningful with size_bytes) */
	enum ferry_gcs_object_state state;     /* restore only: the state to set */
	bool owner_dead;		       /* restore only */
	const char *spill_url;		       /* NULL = none */
	uint32_t nlocations;		       /* length of locations */
	const struct ferry_node_id *locations; /* add: initial copies (0 or more) */
	const struct ferry_gcs_object_place *places; /* parallel to locations; NULL: all unknown */
};

/*
 * Called after an entry changed (state, locations, spill) with @removed false, or just before it
 * is freed with @removed true. Must not modify the directory.
 */
typedef void (*ferry__objdir_changed_fn)(void *arg, const struct ferry__objdir_entry *e,
					 bool removed);

/* Options; all zeros is one unsharded directory without a change callback. */
struct ferry__objdir_opts {
	uint32_t shard_index;		  /* this directory's shard */
	uint32_t shard_count;		  /* shards in all; 0 = 1 */
	ferry__objdir_changed_fn changed; /* or NULL */
	void *arg;			  /* for changed */
};

struct ferry__objdir;

int ferry__objdir_create(const struct ferry__objdir_opts *opts, struct ferry__objdir **out);
void ferry__objdir_destroy(struct ferry__objdir *od);
/* ferry__objdir_set_changed() - replace the change callback (NULL: none). */
void ferry__objdir_set_changed(struct ferry__objdir *od, ferry__objdir_changed_fn fn, void *arg);

/*
 * ferry__objdir_add() - register object @info->id with its owner, size and initial locations
 * (state pending, or available if it has a location or a spill URL). Returns 1, -EEXIST,
 * -EXDEV (another shard's object), -EINVAL (nil owner, bad URL, duplicate location), -ENOMEM
 * (directory unchanged).
 */
int ferry__objdir_add(struct ferry__objdir *od, const struct ferry__objdir_info *info);

/* ferry__objdir_restore() - put an entry exactly as @info says (snapshots). 1, -EEXIST, -EINVAL,
 * -ENOMEM. */
int ferry__objdir_restore(struct ferry__objdir *od, const struct ferry__objdir_info *info);

/*
 * ferry__objdir_add_location() - a copy of @id now lives on @node, at @place in its store (NULL,
 * or alloc 0: unknown). @size_bytes, if not 0, must match the known size (or sets it, and
 * @metadata_bytes with it). A copy already there takes a known @place that differs from its own
 * in any field, the check included (the node holds a new copy: it dropped the object and made
 * it again), and that counts as a change: reported and returned as 1 like an addition; an
 * unknown @place leaves its place as it is. Returns 1 added or place changed, 0 already there,
 * -ENOENT (unknown object), -EOWNERDEAD (its owner died: free the copy), -EINVAL (size
 * mismatch), -E2BIG (too many copies), -ENOMEM.
 */
int ferry__objdir_add_location(struct ferry__objdir *od, const struct ferry_object_id *id,
			       const struct ferry_node_id *node, uint64_t size_bytes,
			       uint32_t metadata_bytes, const struct ferry_gcs_object_place *place);

/* ferry__objdir_remove_location() - the copy on @node is gone; with no copy and no spilled copy
 * left an available object becomes lost. 1, 0 (was not there), -ENOENT (unknown object). */
int ferry__objdir_remove_location(struct ferry__objdir *od, const struct ferry_object_id *id,
				  const struct ferry_node_id *node);

/* ferry__objdir_set_spilled() - @url (NULL: none) is where the spilled copy is. 0, -ENOENT,
 * -EOWNERDEAD, -E2BIG (URL too long), -ENOMEM. */
int ferry__objdir_set_spilled(struct ferry__objdir *od, const struct ferry_object_id *id,
			      const char *url);

/* ferry__objdir_remove() - forget @id (its owner freed it). 0 or -ENOENT. */
int ferry__objdir_remove(struct ferry__objdir *od, const struct ferry_object_id *id);

/* ferry__objdir_owner_died() - mark every object @owner owns lost. Returns how many changed. */
int ferry__objdir_owner_died(struct ferry__objdir *od, const struct ferry_worker_id *owner);

/* ferry__objdir_node_died() - drop every location on @node; objects left with no copy, and
 * objects owned from @node, become lost. Returns how many changes it reported (an object that
 * lost a copy and its owner counts twice). */
int ferry__objdir_node_died(struct ferry__objdir *od, const struct ferry_node_id *node);

const struct ferry__objdir_entry *ferry__objdir_get(const struct ferry__objdir *od,
						    const struct ferry_object_id *id);
size_t ferry__objdir_count(const struct ferry__objdir *od);
/* ferry__objdir_next() - iterate (start *@cursor at 0); NULL at the end. No changes meanwhile. */
const struct ferry__objdir_entry *ferry__objdir_next(const struct ferry__objdir *od,
						     size_t *cursor);

#endif
