/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store core: the arena, the control region with the object index, the allocator, client
 * slots and chunks, deferred deletes and eviction, without any socket. The plasma server
 * (ferry-plasma, or the node daemon) wraps it: it hands each client the two region fds over
 * SCM_RIGHTS, calls client_add/client_remove as clients come and go, and turns requests into
 * these calls. Clients do get/release/contains, create_local and seal themselves through the
 * index (plasma/index.h).
 *
 * DESIGN
 * Memory: objects created through the store get their own allocator block (store-private
 * shadow per entry records it: the store never trusts offsets read back from shared memory to
 * free). Small objects a client creates itself live in the client's chunk, one allocator block
 * granted by chunk_grant; the chunk is freed when it is retired (its owner took a new chunk or
 * died) and its last object is gone (shared live counter per chunk).
 * Eviction: secondary copies (no F_PRIMARY) are listed in a CLOCK list and evicted when
 * unpinned; primaries are never evicted.
 * Spilling (store_spill.c, with a spill directory): sealed, unpinned primaries are written to
 * disk (plasma/spill.h), least recently used first, and their memory freed; the entry stays in
 * the index as SPILLED (its ID stays taken, contains() still sees it, get() is told -ENODATA
 * and asks the store, which restores it into a new block). Two triggers: make_room(), the one
 * place that finds arena space for a create, a chunk or a restore (evict secondaries first,
 * then spill, then -ENOSPC), and tick(), which spills while usage is past the threshold. The
 * bytes are on disk before the entry leaves SEALED, and a pin that races the spill wins (the
 * disk copy is dropped).
 * Background spills (with opts.post): tick() hands its batch to a worker thread and returns;
 * the store keeps serving. The victims are marked spilling in their shadow: their memory must
 * stay while the worker reads it, so a delete of one is deferred (as for a pinned object) and
 * no other spill picks it. When the batch is on disk, the store takes it back (posted call, or
 * the next tick) and commits each victim as a synchronous spill does. make_room() that finds
 * nothing else to spill waits for the batch in flight. One batch is in flight at a time.
 * A batch holds its victims least recently used first, and in the order they were made among
 * equals; each spill record names the next one of its batch. A restore reads the objects after
 * the one asked for along with it, in one pass (those still spilled, close behind each other,
 * up to an eighth of the arena and 64 MiB, in free memory only: nothing is evicted or spilled
 * for them), and publishes them too (opts.on_restored tells the caller which): a batch is
 * mostly read back together, and a client then finds them in memory without asking.
 * Background restores (restore_begin, with opts.post): the store plans the read (blocks made
 * room for, the objects read along), the spill worker reads, and the store publishes them when
 * posted back (or on the next tick), telling the caller through opts.on_restore_done. The
 * entries of a restore in flight are marked restoring: one restore per entry, no read-ahead
 * of them by another; a delete meanwhile goes ahead (the read's file descriptor is its own),
 * and publishing then finds the entry changed and gives the block back. Destroy drops the
 * restores the worker did not read. The worker thread serves both (one disk helper).
 *
 * Thread model: one thread (the store's loop) calls everything here. Clients in other
 * processes run the index's lock-free operations concurrently.
 */
#ifndef FERRY_PLASMA_STORE_H
#define FERRY_PLASMA_STORE_H

#include <stdint.h>

#include <ferry/plasma.h>

#include "plasma/arena.h"
#include "plasma/index.h"

#define FERRY__PLASMA_STORE_NO_PREFAULT 0x1u /* skip pre-faulting (tests, tiny stores) */
#define FERRY__PLASMA_STORE_POISON 0x2u	     /* fill freed object memory with 0xdb */
#define FERRY__PLASMA_STORE_SHM_FILE 0x4u    /* back the regions with /dev/shm files */

#define FERRY__PLASMA_POISON_BYTE 0xdb

struct ferry__plasma_store_opts {
	uint64_t memory_bytes;		       /* arena; 0: ferry_plasma_default_memory_bytes() */
	enum ferry_plasma_hugepages hugepages; /* arena page policy */
	uint32_t max_objects;		       /* 0: one per 64 KiB of arena, 4096 .. 2^20 */
	uint32_t max_clients;		       /* client slots incl. the store's; 0: 64 */
	uint32_t pin_records;		       /* pin records per client; 0: 1024 */
	uint32_t max_chunks;		       /* client chunks alive at once; 0: 4 per client */
	unsigned flags;			       /* FERRY__PLASMA_STORE_* */
	const char *spill_dir;		       /* spill primaries here; NULL: never spill */
	uint32_t spill_threshold_pct;	       /* tick() spills past this usage; 0: 80 */
	uint64_t spill_max_bytes;	       /* spill space allowed; 0: the disk's */
	uint64_t spill_batch_bytes; /* least bytes a spill writes; 0: 64 MiB, <= arena/8 */
	/* Optional, on the store's thread: sealed entry @index (generation @gen) is about to
	 * leave, deleted or (@evicted) evicted; it is still readable (ID, sizes). Not called for
	 * aborts, spills or restores. Must not call back into the store. */
	void (*on_removed)(void *arg, uint32_t index, uint32_t gen, bool evicted);
	/* A spilled entry the caller did not ask for was restored with one it did (read from
	 * the same batch, plasma/store_spill.c): it is SEALED at a new place. Must not call back
	 * into the store. NULL: not told. */
	void (*on_restored)(void *arg, uint32_t index, uint32_t gen);
	/* A background restore (restore_begin) of entry @index (generation @gen) ended, for the
	 * one asked for and each one read with it: @status 0: it is SEALED at a new place;
	 * -ENOENT: not restored (deleted, changed, or not read along after all): look again;
	 * else the read's -errno (it stays spilled). Must not call back into the store, but may
	 * start another restore. NULL: not told. */
	void (*on_restore_done)(void *arg, uint32_t index, uint32_t gen, int status);
	void *hook_arg; /* for on_removed, on_restored, on_restore_done */
	/* Optional: have @fn(@fn_arg, status) run on the store's thread soon; called from another
	 * thread; returns 0 or -errno. With it, tick() spills in the background: a worker thread
	 * waits for the disk, and the store takes the batch back through a posted call (or the
	 * next tick). Without it, tick() spills synchronously. */
	int (*post)(void *arg, void (*fn)(void *fn_arg, int status), void *fn_arg);
	void *post_arg; /* for post */
};

/* object_create flag: fail with -ENOSPC rather than evict or spill to make room. */
#define FERRY__PLASMA_CREATE_NO_EVICT 0x100u

struct ferry__plasma_store;

/* ferry__plasma_store_create() - create the regions, format the index, set up the allocator.
 * @opts may be NULL. Returns 0, -EINVAL, -ENOMEM, -ENOSPC or -errno from the arena.
 * *@out is written only on success. */
int ferry__plasma_store_create(const struct ferry__plasma_store_opts *opts,
			       struct ferry__plasma_store **out);

/* ferry__plasma_store_destroy() - unmap and close everything (clients that still map the
 * regions keep their mappings; the memory goes when the last one unmaps). Accepts NULL. */
void ferry__plasma_store_destroy(struct ferry__plasma_store *s);

/* The store's own view of the index, and the regions to hand to clients (fd and size). */
struct ferry__plasma_index *ferry__plasma_store_index(struct ferry__plasma_store *s);
const struct ferry__plasma_arena *ferry__plasma_store_arena(const struct ferry__plasma_store *s);
const struct ferry__plasma_arena *ferry__plasma_store_control(const struct ferry__plasma_store *s);

/* ferry__plasma_store_client_add() - a client slot for process @pid into *@slot.
 * Returns 0 or -EUSERS. */
int ferry__plasma_store_client_add(struct ferry__plasma_store *s, int pid, uint32_t *slot);

/*
 * ferry__plasma_store_client_remove() - the client in @slot is gone (its process exited): give
 * back its pins, abort the objects it was creating, retire its chunks, free what that
 * unblocked, and free the slot. Returns 0, -EINVAL (bad slot) or -EAGAIN (a live client held
 * the writer lock too long: call again).
 */
int ferry__plasma_store_client_remove(struct ferry__plasma_store *s, uint32_t slot);

/*
 * ferry__plasma_store_client_retire() - client_remove() except that the slot stays DEAD (not
 * given to a new client): for a client whose connection closed while its process may still be
 * running and writing to its slot. Call client_remove() once the process is gone (it reclaims
 * again whatever the process did meanwhile). Same returns.
 */
int ferry__plasma_store_client_retire(struct ferry__plasma_store *s, uint32_t slot);

/*
 * ferry__plasma_store_object_create_owned() - create @id for client @slot with its own block,
 * evicting secondaries if the arena is full; the client writes the bytes, then seals through
 * the index. @owner_id: the worker or driver that owns it (NULL or nil: the node).
 * @flags: FERRY__PLASMA_F_PRIMARY or 0 (a secondary copy: evictable once sealed), plus
 * FERRY__PLASMA_CREATE_NO_EVICT.
 * Returns 0, -E2BIG (larger than the arena), -EEXIST, -ENOSPC (no room after eviction and
 * spilling, or the object table is full), -ENOMEM, -EAGAIN (writer lock timeout), -EINVAL
 * (bad slot).
 */
int ferry__plasma_store_object_create_owned(struct ferry__plasma_store *s, uint32_t slot,
					    const struct ferry_object_id *id, uint64_t data_size,
					    uint32_t metadata_size, unsigned flags,
					    const struct ferry_worker_id *owner_id,
					    struct ferry__plasma_object *out);

/* ferry__plasma_store_object_create() - create_owned() with a nil owner_id (node-owned). */
static inline int ferry__plasma_store_object_create(struct ferry__plasma_store *s, uint32_t slot,
						    const struct ferry_object_id *id,
						    uint64_t data_size, uint32_t metadata_size,
						    unsigned flags,
						    struct ferry__plasma_object *out)
{
	return ferry__plasma_store_object_create_owned(s, slot, id, data_size, metadata_size, flags,
						       NULL, out);
}

/* ferry__plasma_store_object_sealed() - @obj (read from the index) was sealed by a client:
 * if it is a secondary copy the store does not list yet (one the client created in its
 * chunk), list it for eviction. Idempotent. */
void ferry__plasma_store_object_sealed(struct ferry__plasma_store *s,
				       const struct ferry__plasma_object *obj);

/* ferry__plasma_store_object_abort() - discard @obj, which @slot is creating.
 * Returns 0, -EPERM (another client's) or -ENOENT (not being created). */
int ferry__plasma_store_object_abort(struct ferry__plasma_store *s, uint32_t slot,
				     const struct ferry__plasma_object *obj);

/* ferry__plasma_store_object_delete() - delete sealed (or spilled) object @id. Returns 0 (freed), 1
 * (pinned: freed when the last pin goes, see collect), -EBUSY (still being created),
 * -ENOENT. Deleting an object already awaiting deletion returns 1. */
int ferry__plasma_store_object_delete(struct ferry__plasma_store *s,
				      const struct ferry_object_id *id);

/* ferry__plasma_store_collect() - free deferred deletes whose pins are gone (call when a client
 * reports that a release returned 1, and now and then). Returns the number freed. */
int ferry__plasma_store_collect(struct ferry__plasma_store *s);

/* ferry__plasma_store_evict() - evict unpinned sealed secondary copies, least recently used
 * first, until @bytes of arena are freed or none is left. Returns the number evicted; the
 * bytes freed (allocator blocks) go to *@freed if not NULL. */
int ferry__plasma_store_evict(struct ferry__plasma_store *s, uint64_t bytes, uint64_t *freed);

/*
 * ferry__plasma_store_chunk_grant() - give client @slot a fresh chunk of @size bytes (rounded
 * up to 64) for create_local, retiring its previous chunk. Returns 0, -EINVAL (bad slot or
 * size), -ENOSPC (no room after eviction, or every chunk counter is in use), -ENOMEM.
 */
int ferry__plasma_store_chunk_grant(struct ferry__plasma_store *s, uint32_t slot, uint64_t size);

/*
 * ferry__plasma_store_spill() - spill sealed, unpinned primaries (least recently used first) in
 * one batch of at least @bytes (and at least the batch size). Objects in a chunk that its
 * owner still creates in are left alone. Returns the number spilled (0: nothing to spill, or no
 * spill directory), -ENOSPC (disk full or spill limit), -ENOMEM or -EIO; the bytes freed in the
 * arena go to *@freed if not NULL.
 */
int ferry__plasma_store_spill(struct ferry__plasma_store *s, uint64_t bytes, uint64_t *freed);

/*
 * ferry__plasma_store_restore() - read spilled entry @index (generation @gen) back into a new
 * block (making room as for a create) and make it SEALED again. Returns 0, -ENOENT (not
 * spilled at @gen), -ENOSPC, -ENOMEM, or the read's -errno (it stays spilled).
 */
int ferry__plasma_store_restore(struct ferry__plasma_store *s, uint32_t index, uint32_t gen);

/*
 * ferry__plasma_store_restore_begin() - restore() without waiting for the disk when the store
 * can be posted to (opts.post): the read runs on the worker thread and the store publishes
 * the result when it is posted back (opts.on_restore_done). Returns -EINPROGRESS (started, or
 * a restore of that entry is in flight already), or what restore() returns (without opts.post
 * it is restore(); -ENOENT: not spilled at @gen; -ENOSPC, -ENOMEM: nothing started).
 */
int ferry__plasma_store_restore_begin(struct ferry__plasma_store *s, uint32_t index, uint32_t gen);

/* ferry__plasma_store_tick() - periodic work: collect() and, past the spill threshold, spill
 * down to 5 points below it. Returns the number of objects spilled, or -errno. */
int ferry__plasma_store_tick(struct ferry__plasma_store *s);

/* ferry__plasma_store_quiesce() - stop the background spill thread (after its batch is
 * written): from then on nothing calls opts.post. The batch is taken back by the next tick,
 * make_room or destroy; a later background spill starts the thread again. */
void ferry__plasma_store_quiesce(struct ferry__plasma_store *s);

/* The spill area (tests inject faults through it), NULL without a spill directory. */
struct ferry__plasma_spill *ferry__plasma_store_spill_area(struct ferry__plasma_store *s);

/* ferry__plasma_store_stats() - current figures. */
void ferry__plasma_store_stats(struct ferry__plasma_store *s, struct ferry_plasma_stats *out);

#endif
