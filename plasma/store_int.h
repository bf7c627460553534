/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private state of the store core, shared by store.c (memory, objects, clients, chunks) and
 * store_spill.c (spilling primaries to disk and restoring them). Nothing else includes it.
 */
#ifndef FERRY_PLASMA_STORE_INT_H
#define FERRY_PLASMA_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/hashmap.h"
#include "plasma/allocator.h"
#include "plasma/lru.h"
#include "plasma/spill.h"
#include "plasma/store.h"

#define FERRY__STORE_NO_BLOCK UINT64_MAX

/* What the store knows of an entry's memory; valid while gen matches the entry's. */
struct ferry__store_shadow {
	uint64_t block;	       /* allocator block holding the bytes; NO_BLOCK: chunk or disk */
	uint32_t gen;	       /* entry generation this describes; 0: none */
	uint32_t deferred_pos; /* position in the deferred list + 1; 0: not deferred */
	bool spilling;	       /* a background spill reads its bytes: keep them */
	bool restoring;	       /* a background restore reads it back: no second one */
};

enum ferry__store_chunk_state {
	FERRY__STORE_CHUNK_FREE,    /* counter unused */
	FERRY__STORE_CHUNK_ACTIVE,  /* its owner creates in it */
	FERRY__STORE_CHUNK_RETIRED, /* freed when its last object goes */
};

struct ferry__store_chunk {
	uint64_t offset;		     /* allocator block */
	uint64_t size;			     /* bytes */
	uint32_t owner;			     /* client slot */
	enum ferry__store_chunk_state state; /* see the enum */
};

/* Where a spilled entry's bytes are (value of the store's spilled map, keyed by entry index). */
struct ferry__store_spilled {
	uint64_t offset;   /* in the spill file */
	uint64_t size;	   /* data + metadata bytes */
	uint32_t file;	   /* spill file id */
	uint32_t gen;	   /* entry generation */
	uint32_t next;	   /* the entry after it in its batch (file order); UINT32_MAX: none */
	uint32_t next_gen; /* ... at this generation */
};

#define FERRY__STORE_AHEAD_MAX 31u /* objects read with a restore, after the one asked for */

/* A restore's reads: the object asked for first, then those after it in its file. */
struct ferry__store_plan {
	struct ferry__plasma_spill_read objs[FERRY__STORE_AHEAD_MAX + 1]; /* the reads */
	uint64_t blocks[FERRY__STORE_AHEAD_MAX + 1];			  /* their arena blocks */
	uint32_t index[FERRY__STORE_AHEAD_MAX + 1];			  /* their entries */
	uint32_t gen[FERRY__STORE_AHEAD_MAX + 1]; /* ... at these generations */
	uint32_t n;				  /* how many */
};

/* A restore in the background (store_spill.c): planned and published on the store's thread,
 * read by the worker. */
struct ferry__store_restore {
	struct ferry__store_restore *next;    /* in the worker's queue, or the read list */
	struct ferry__plasma_spill_rjob *job; /* the read */
	uint32_t read;			      /* worker: objects read (0: the read failed) */
	struct ferry__store_plan plan;	      /* what it reads, where to */
};

/* The background spill (store_spill.c): one batch at a time; and restores, one per object. */
struct ferry__store_spiller {
	pthread_t thread;			 /* the worker */
	pthread_mutex_t lock;			 /* todo, stop, and waits for done */
	pthread_cond_t cond;			 /* todo set, stop set, or done set */
	struct ferry__plasma_spill_batch *todo;	 /* handed to the worker */
	bool stop;				 /* the worker exits when idle */
	bool started;				 /* thread (and lock, cond) exist */
	_Atomic bool done;			 /* the worker wrote batch */
	struct ferry__plasma_spill_batch *batch; /* in flight; NULL: none */
	struct ferry__plasma_spill_item *items;	 /* its items */
	uint32_t *victims;			 /* their entries */
	uint32_t n;				 /* how many */
	struct ferry__store_restore *rtodo;	 /* restores for the worker, oldest first */
	struct ferry__store_restore **rtail;	 /* ... where the next goes */
	struct ferry__store_restore *rdone;	 /* read, to publish on the store's thread */
	uint32_t restores;			 /* store's thread: in flight (queued to done) */
};

struct ferry__plasma_store {
	struct ferry__plasma_arena arena;      /* object bytes */
	struct ferry__plasma_arena control;    /* the index */
	struct ferry__plasma_index ix;	       /* the store's view of the index */
	struct ferry__plasma_allocator *alloc; /* blocks of the arena */
	struct ferry__plasma_lru lru;	       /* evictable (secondary) entries */
	struct ferry__store_shadow *shadow;    /* per entry slot */
	struct ferry__store_chunk *chunks;     /* per chunk counter */
	uint32_t *deferred;		       /* entries deleted while pinned */
	uint32_t deferred_count;	       /* ... how many */
	uint32_t max_chunks;		       /* chunk counters */
	uint64_t chunk_count;		       /* chunks not FREE */
	uint64_t chunk_bytes;		       /* their bytes */
	uint64_t evicted_objects;	       /* since start */
	uint64_t evicted_bytes;		       /* since start */
	unsigned flags;			       /* FERRY__PLASMA_STORE_* */
	void (*on_removed)(void *arg, uint32_t index, uint32_t gen, bool evicted);    /* or NULL */
	void (*on_restored)(void *arg, uint32_t index, uint32_t gen);		      /* or NULL */
	void (*on_restore_done)(void *arg, uint32_t index, uint32_t gen, int status); /* or NULL */
	void *hook_arg; /* for on_removed, on_restored */
	int (*post)(void *arg, void (*fn)(void *fn_arg, int status), void *fn_arg); /* or NULL */
	void *post_arg;								    /* for post */
	struct ferry__store_spiller bg; /* the background spill */
	/* spilling (store_spill.c) */
	struct ferry__plasma_spill *spill; /* NULL: primaries are never spilled */
	struct ferry__hashmap spilled;	   /* entry index -> struct ferry__store_spilled */
	uint32_t spill_threshold_pct;	   /* usage that starts spilling on a tick */
	uint64_t spill_batch_bytes;	   /* least bytes one spill writes */
	uint64_t spilled_bytes;		   /* bytes of the entries on disk now */
	uint64_t spilled_total_objects;	   /* since start */
	uint64_t spilled_total_bytes;	   /* since start */
	uint64_t restored_objects;	   /* since start */
	uint64_t restored_bytes;	   /* since start */
	uint32_t spill_cursor;		   /* index slot where the next victim search starts */
	uint64_t idle_allocated;	   /* tick found nothing to spill at this usage */
	uint64_t idle_seals;		   /* ... and this seal count */
};

/* store.c */

/* Allocate a block of @size, evicting secondaries and (unless @flags has NO_EVICT) spilling
 * primaries while that makes progress. Returns 0, -ENOSPC, -E2BIG, -ENOMEM. */
int ferry__store_make_room(struct ferry__plasma_store *s, uint64_t size, unsigned flags,
			   uint64_t *offset);

/* Give back what entry @index holds: its arena block, its share of a chunk, or its spill
 * record. The entry itself is left as it is. Returns the allocator bytes freed. */
uint64_t ferry__store_release_bytes(struct ferry__plasma_store *s, uint32_t index);

/* Free entry @index's memory and make it a tombstone (DELETING, EVICTING or aborted). */
uint64_t ferry__store_finalize(struct ferry__plasma_store *s, uint32_t index);

/* store_spill.c */

/* Drop the spill record of entry @index, if it has one. */
void ferry__store_spill_forget(struct ferry__plasma_store *s, uint32_t index);
/* Wait for the background batch in flight, if any, and take it back. Returns true if there
 * was one (memory may have been freed). */
bool ferry__store_spill_settle(struct ferry__plasma_store *s);
/* Stop the background worker (after its batch is written, and the restore it reads). The
 * batch stays to be taken back; the restores not read stay queued (restore_poll restarts it). */
void ferry__store_spill_stop(struct ferry__plasma_store *s);
/* Drop the background restores without publishing them (the store is going). */
void ferry__store_restore_discard(struct ferry__plasma_store *s);

#endif
