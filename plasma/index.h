/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index in shared memory: an open-addressing table (linear probing, tombstones) of
 * ObjectID -> entry, plus per-client slots, laid out in the control region (plasma/layout.h).
 * It lets a client get and release a sealed local object, and create and seal a small one in
 * its own arena chunk, with no socket round trip.
 *
 * DESIGN
 * Who runs where: the store process formats the region and is the only one that frees memory
 * (delete, evict, abort, reclaim). Clients (other processes, or threads of the store) map it
 * and call the lock-free get/release/contains/seal and create_local.
 *
 * Why a separate region, not the head of the arena: the arena is registered whole for remote
 * RDMA reads, and the index must not be readable by peers; its size is independent of the
 * arena's hugepage rounding; and the arena stays one flat range for the allocator.
 *
 * Pins. An entry does not hold a pin count: it holds a 128-bit mask, bit c set while client
 * slot c pins it, and client c keeps its own counts in its slot's pin records. A client pins
 * an object it already pins by bumping its own record (no shared write); a first pin sets its
 * bit (seq_cst RMW) and then re-reads the entry word (seq_cst): if the word is unchanged the
 * pin holds. The store removes an entry by CASing SEALED -> EVICTING|DELETING (seq_cst) and
 * then reading the mask (seq_cst). These two store-then-load sequences (Dekker) guarantee that
 * at least one side sees the other: either the reader sees the state change and backs off, or
 * the store sees the bit and does not free. A dead client's pins are given back exactly by
 * clearing its bit in every entry; no count can be half-updated.
 *
 * Readers never see a torn entry: every field but the state is written while the slot is
 * CLAIMED (invisible) and published by a release store of CREATING; the ID is compared again
 * after the pin is validated, when it can no longer change.
 *
 * Inserts. Claiming a slot (FREE or TOMB -> CLAIMED -> CREATING) and turning tombstones back
 * into FREE slots are serialised by the header's writer lock, a robust process-shared mutex:
 * with several processes inserting, this is what keeps IDs unique (a lock-free claim could put
 * one ID in two slots). The critical section is a probe and a few stores. A holder that dies
 * leaves at most one CLAIMED entry, which the store's reclaim turns into a tombstone; the next
 * locker sees EOWNERDEAD and marks the mutex consistent. Every other transition is a
 * lock-free CAS on the entry word.
 *
 * Deletion of a pinned object is deferred: the entry stays DELETING (no new pins) and the
 * client whose release empties the mask is told (release returns 1) so that it can notify the
 * store; the store also re-checks its deferred list.
 *
 * Thread model: the functions taking a client slot are lock-free and may run concurrently in
 * any number of processes, but calls for one slot must be serialised by its owner (one slot
 * per process, one thread at a time, or a lock in the client library). Functions marked
 * "store only" run in the store's single writer thread.
 */
#ifndef FERRY_PLASMA_INDEX_H
#define FERRY_PLASMA_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/id.h>

#include "plasma/layout.h"

/* Sizes of a control region. All fields must be set (the store resolves defaults). */
struct ferry__plasma_index_params {
	uint64_t arena_size;  /* bytes of the arena the offsets refer to */
	uint32_t max_objects; /* live objects, 1 .. 2^28 */
	uint32_t max_clients; /* client slots, 1 .. FERRY__PLASMA_MAX_CLIENTS (slot 0: store) */
	uint32_t pin_records; /* per client; rounded up to a power of two, >= 4 */
	uint32_t max_chunks;  /* client chunks alive at once (active and draining), >= 1 */
};

/* A process's view of a formatted control region (both mapped by the caller). */
struct ferry__plasma_index {
	struct ferry__plasma_header *hdr;    /* region start */
	struct ferry__plasma_entry *entries; /* table_slots entries */
	struct ferry__plasma_entry_ext *ext; /* table_slots cold fields */
	uint8_t *clients;		     /* first client slot */
	_Atomic uint32_t *chunk_live;	     /* max_chunks live-object counters */
	uint8_t *arena;			     /* arena mapping in this process */
	uint64_t arena_size;		     /* its size */
	uint64_t client_stride;		     /* bytes per client slot */
	uint32_t mask;			     /* table_slots - 1 */
	uint32_t record_mask;		     /* pin_records - 1 */
	uint32_t max_clients;		     /* client slots */
	uint32_t max_chunks;		     /* chunk counters */
};

/* An object as seen through the index. */
struct ferry__plasma_object {
	uint8_t *data;		/* data in this process's arena mapping */
	uint64_t offset;	/* data offset in the arena */
	uint64_t data_size;	/* data bytes */
	uint32_t metadata_size; /* metadata bytes, at data + data_size */
	uint32_t index;		/* entry slot */
	uint32_t gen;		/* entry generation */
	uint16_t owner;		/* creator's client slot */
	uint8_t flags;		/* FERRY__PLASMA_F_* */
	uint8_t state;		/* enum ferry__plasma_state when it was read */
};

/* What the writer-lock holder inserts. */
struct ferry__plasma_insert {
	const struct ferry_object_id *id;	/* object ID */
	uint64_t offset;			/* data offset in the arena */
	uint64_t data_size;			/* data bytes */
	uint32_t metadata_size;			/* metadata bytes */
	uint32_t chunk;				/* 1 + chunk index holding the bytes; 0: none */
	uint16_t owner;				/* owner's client slot */
	uint8_t flags;				/* FERRY__PLASMA_F_* */
	const struct ferry_worker_id *owner_id; /* the owning worker or driver; NULL: nil */
};

/* ---- setup ---- */

/* ferry__plasma_index_region_size() - bytes of a control region for @p into *@size.
 * Returns 0 or -EINVAL (logged) for out-of-range parameters. */
int ferry__plasma_index_region_size(const struct ferry__plasma_index_params *p, uint64_t *size);

/* ferry__plasma_index_format() - lay out an empty index in @region (@size bytes, at least
 * ferry__plasma_index_region_size()), slot 0 live for the store. Store only.
 * Returns 0, -EINVAL, or -errno from the mutex setup. */
int ferry__plasma_index_format(void *region, uint64_t size,
			       const struct ferry__plasma_index_params *p, int store_pid);

/* ferry__plasma_index_open() - validate a formatted region and fill @ix. @arena is this
 * process's mapping of the arena. Returns 0, or -EPROTO (logged) when the magic, version,
 * sizes or offsets do not match this build or do not fit the mappings. */
int ferry__plasma_index_open(struct ferry__plasma_index *ix, void *region, uint64_t region_size,
			     void *arena, uint64_t arena_size);

/* ---- client operations (lock-free, any process) ---- */

/*
 * ferry__plasma_index_get() - find sealed object @id and pin it for client @slot; fill @out.
 * Returns 0, -ENOENT (absent or being deleted), -EINPROGRESS (created but not sealed yet:
 * wait through the store), -ENODATA (spilled to disk: the store restores it), -EAGAIN (kept
 * changing under us: ask the store), -ENOSPC (the slot's pin records are full: pin through
 * the store), -EINVAL (bad slot).
 */
int ferry__plasma_index_get(struct ferry__plasma_index *ix, uint32_t slot,
			    const struct ferry_object_id *id, struct ferry__plasma_object *out);

/*
 * ferry__plasma_index_release() - drop one pin that @slot holds on @obj (from get).
 * Returns 0, 1 if this emptied the pin mask of an object being deleted (tell the store so it
 * frees it now), or -ENOENT (logged) if @slot holds no pin on it.
 */
int ferry__plasma_index_release(struct ferry__plasma_index *ix, uint32_t slot,
				const struct ferry__plasma_object *obj);

/* ferry__plasma_index_contains() - 1 if @id is sealed here (in memory or spilled to disk), 0 if
 * not (a snapshot). */
int ferry__plasma_index_contains(const struct ferry__plasma_index *ix,
				 const struct ferry_object_id *id);

/*
 * ferry__plasma_index_create_owned() - create @id (CREATING, made by @slot, owned by worker
 * or driver @owner_id, NULL: nil) in the slot's arena chunk, without the store. @flags:
 * FERRY__PLASMA_F_PRIMARY for a primary, 0 for a secondary copy. The store does not know a
 * secondary made here until it is told of its seal (a PlasmaSeal notice, or the scan when the
 * slot is retired): only then is it listed for eviction. Write the bytes at @out->data, then
 * seal.
 * Returns 0, -EEXIST, -E2BIG (sizes overflow), -ENOBUFS (no chunk, or it has no room: ask the
 * store for a chunk or create through it), -ENOSPC (object table full), -EINVAL (bad slot).
 */
int ferry__plasma_index_create_owned(struct ferry__plasma_index *ix, uint32_t slot,
				     const struct ferry_object_id *id, uint64_t data_size,
				     uint32_t metadata_size, unsigned flags,
				     const struct ferry_worker_id *owner_id,
				     struct ferry__plasma_object *out);

/* ferry__plasma_index_create_local() - create_owned() with a nil owner_id (node-owned). */
static inline int ferry__plasma_index_create_local(struct ferry__plasma_index *ix, uint32_t slot,
						   const struct ferry_object_id *id,
						   uint64_t data_size, uint32_t metadata_size,
						   unsigned flags, struct ferry__plasma_object *out)
{
	return ferry__plasma_index_create_owned(ix, slot, id, data_size, metadata_size, flags, NULL,
						out);
}

/*
 * ferry__plasma_index_seal() - make @obj (CREATING, owned by @slot) immutable and visible to
 * get. The bytes written before are visible to every reader that pins it after.
 * Returns 0, 1 if the store listens for seals (a hook or subscriber: tell it, it is not
 * otherwise woken), 2 if a get or wait is parked there (tell it now), -EPERM (another slot's
 * object), -EALREADY (already sealed), -ENOENT (no such object or generation).
 */
int ferry__plasma_index_seal(struct ferry__plasma_index *ix, uint32_t slot,
			     const struct ferry__plasma_object *obj);

/* ---- store operations (store only) ---- */

/*
 * ferry__plasma_index_insert() - claim a slot for @in and publish it CREATING; fill @out.
 * Takes the writer lock, waiting at most @timeout_ms (negative: no limit). Also used by
 * create_local. Returns 0, -EEXIST (@in->id is present, in any state but a tombstone),
 * -ENOSPC (max_objects reached, or no free slot after a tombstone sweep), -EAGAIN (lock
 * timeout).
 */
int ferry__plasma_index_insert(struct ferry__plasma_index *ix,
			       const struct ferry__plasma_insert *in, int timeout_ms,
			       struct ferry__plasma_object *out);

/* ferry__plasma_index_find() - the entry holding @id (CREATING..EVICTING) into @out, without
 * pinning. Returns the state (> 0) or -ENOENT. */
int ferry__plasma_index_find(const struct ferry__plasma_index *ix, const struct ferry_object_id *id,
			     struct ferry__plasma_object *out);

/* ferry__plasma_index_read_id() - the ID held by entry @index (valid from CREATING on, while
 * the entry cannot change: store only). */
void ferry__plasma_index_read_id(const struct ferry__plasma_index *ix, uint32_t index,
				 struct ferry_object_id *out);

/* ferry__plasma_index_alloc() - entry @index's placement id (layout.h: entry_ext.alloc).
 * Not in struct ferry__plasma_object: it lies on another cache line than the entry, which
 * every get would then touch; read it only where a placement is named (meaningful while the
 * entry is pinned, or sealed for the store). */
static inline uint64_t ferry__plasma_index_alloc(const struct ferry__plasma_index *ix,
						 uint32_t index)
{
	return ix->ext[index & ix->mask].alloc;
}

/* ferry__plasma_index_owner_id() - entry @index's owning worker or driver (layout.h:
 * entry_ext.owner_id; nil: the node), meaningful from CREATING on while the entry keeps its
 * generation (pinned, or sealed for the store). Off the entry's cache line, like alloc. */
static inline struct ferry_worker_id
ferry__plasma_index_owner_id(const struct ferry__plasma_index *ix, uint32_t index)
{
	return ix->ext[index & ix->mask].owner_id;
}

/* ferry__plasma_index_read() - entry @index into @out (fields valid from CREATING on).
 * Returns its state (>= 0). */
int ferry__plasma_index_read(const struct ferry__plasma_index *ix, uint32_t index,
			     struct ferry__plasma_object *out);

/* ferry__plasma_index_try_evict() - SEALED -> EVICTING unless pinned. Returns 0 (the caller
 * frees the memory, then ferry__plasma_index_free_slot()), -EBUSY (pinned: left SEALED) or
 * -ENOENT (not sealed at generation @gen). */
int ferry__plasma_index_try_evict(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen);

/* ferry__plasma_index_delete() - SEALED -> DELETING. Returns 0 (unpinned: the caller frees the
 * memory, then free_slot), 1 (pinned: deferred; see pinned()), -EBUSY (still CREATING),
 * -EALREADY (already deleting) or -ENOENT. */
int ferry__plasma_index_delete(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen);

/* ferry__plasma_index_abort() - CREATING -> DELETING for the owner @slot. Returns 0 (the
 * caller frees, then free_slot), -EPERM (another owner) or -ENOENT (not CREATING at @gen). */
int ferry__plasma_index_abort(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
			      uint32_t slot);

/*
 * ferry__plasma_index_set_state() - CAS entry @index at generation @gen from state @from to
 * @to, for the transitions of spilling (EVICTING -> SPILLED once the bytes are on disk and
 * freed, SPILLED -> DELETING). Returns 0 or -ENOENT (not @from at @gen).
 */
int ferry__plasma_index_set_state(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
				  unsigned from, unsigned to);

/*
 * ferry__plasma_index_restore() - spilled entry @index is back in memory at @offset: record
 * the offset, then publish SEALED (release: a reader that pins it sees the new offset and the
 * bytes). Nobody reads the offset of a SPILLED entry (no pins), so writing it is safe.
 * Returns 0, -EINVAL (the bytes would not fit the arena there) or -ENOENT (not SPILLED at
 * @gen).
 */
int ferry__plasma_index_restore(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
				uint64_t offset);

/*
 * ferry__plasma_index_pin_bit() - pin sealed @id for @slot by its bit in the pin mask alone,
 * with no pin record: for the store, which counts the pins it holds for its clients itself
 * (so their number is not bounded by the records of one slot). The caller must not hold the
 * bit already. Store only. Returns as ferry__plasma_index_get().
 */
int ferry__plasma_index_pin_bit(struct ferry__plasma_index *ix, uint32_t slot,
				const struct ferry_object_id *id, struct ferry__plasma_object *out);

/* ferry__plasma_index_unpin_bit() - drop the bit of pin_bit() on entry @index. Store only.
 * Returns 1 if this emptied the pin mask of an object being deleted, else 0. */
int ferry__plasma_index_unpin_bit(struct ferry__plasma_index *ix, uint32_t slot, uint32_t index);

/* ferry__plasma_index_pinned() - does any client pin entry @index? (seq_cst) */
bool ferry__plasma_index_pinned(const struct ferry__plasma_index *ix, uint32_t index);

/* ferry__plasma_index_free_slot() - turn a DELETING, EVICTING or CLAIMED entry into a
 * tombstone, then try (without waiting for the lock) to turn tombstones back into free slots. */
void ferry__plasma_index_free_slot(struct ferry__plasma_index *ix, uint32_t index);

/* ferry__plasma_index_pin_count() - pins held on entry @index, summed over the client slots'
 * records. Exact when no client is pinning or releasing it at the same time. */
uint64_t ferry__plasma_index_pin_count(const struct ferry__plasma_index *ix, uint32_t index);

/* ---- client slots (store only) ---- */

/* ferry__plasma_index_client_open() - take a free client slot for process @pid into *@slot.
 * Returns 0 or -EUSERS (all slots taken). */
int ferry__plasma_index_client_open(struct ferry__plasma_index *ix, int pid, uint32_t *slot);

/*
 * ferry__plasma_index_client_reclaim() - @slot's process is gone (exited, not merely
 * disconnected: a live process would keep using the slot): mark the slot DEAD, clear its bit
 * from every pin mask, turn its CLAIMED entries into tombstones, hand its sealed objects to the
 * store slot, and recount (ferry__plasma_index_recount()). Its CREATING entries are left for
 * the caller to abort (the caller owns their memory); DELETING entries whose mask this emptied
 * are found by the caller's next check of its deferred deletes. Takes the writer lock
 * (@timeout_ms as for insert). Returns 0, -EINVAL (bad slot) or -EAGAIN (lock timeout: call
 * again).
 */
int ferry__plasma_index_client_reclaim(struct ferry__plasma_index *ix, uint32_t slot,
				       int timeout_ms);

/* ferry__plasma_index_client_close() - free @slot (after reclaim, or for a client that left
 * cleanly holding nothing): its records are wiped and the slot can be reused. */
void ferry__plasma_index_client_close(struct ferry__plasma_index *ix, uint32_t slot);

/* ferry__plasma_index_recount() - recompute the header's used_slots and live_objects and the
 * chunk live counters from the table (after a client died mid-insert). Store only; takes the
 * writer lock as insert does. Returns 0 or -EAGAIN. */
int ferry__plasma_index_recount(struct ferry__plasma_index *ix, int timeout_ms);

static inline struct ferry__plasma_client *
ferry__plasma_index_client(const struct ferry__plasma_index *ix, uint32_t slot)
{
	return (struct ferry__plasma_client *)(void *)(ix->clients +
						       (uint64_t)slot * ix->client_stride);
}

#endif
