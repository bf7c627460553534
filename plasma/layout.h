/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control region's layout: the structures the store and every client map so that lookups,
 * pins and small creates need no socket round trip. A change here is a protocol change: bump
 * FERRY__PLASMA_LAYOUT_VERSION (attach refuses a mismatch).
 *
 *   offset 0             struct ferry__plasma_header (magic, sizes, section offsets, the
 *                        writer lock, shared counters), padded to 4 KiB
 *   entries_offset       struct ferry__plasma_entry[table_slots]      64 B each, hot fields
 *   ext_offset           struct ferry__plasma_entry_ext[table_slots]  32 B each, cold fields
 *   clients_offset       max_clients slots of client_stride bytes: struct ferry__plasma_client
 *                        followed by pin_records struct ferry__plasma_pin_record
 *   chunks_offset        _Atomic uint32_t chunk_live[max_chunks]
 *
 * All cross-process fields are lock-free atomics (address-free on every supported target), so
 * the regions may be mapped at different addresses in different processes.
 */
#ifndef FERRY_PLASMA_LAYOUT_H
#define FERRY_PLASMA_LAYOUT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <ferry/id.h>

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "plasma needs lock-free 64-bit atomics");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "plasma needs lock-free 32-bit atomics");

#define FERRY__PLASMA_MAGIC 0x31414d53414c5046ull /* "FPLASMA1" */
#define FERRY__PLASMA_LAYOUT_VERSION 5u
#define FERRY__PLASMA_MAX_CLIENTS 128u /* bits in an entry's pin mask */
#define FERRY__PLASMA_STORE_SLOT 0u    /* the store's own client slot */

/*
 * Entry states. Transitions, and who makes them:
 *   FREE|TOMB -> CLAIMED -> CREATING      writer-lock holder (store, or a client creating in
 *                                          its chunk)
 *   CREATING -> SEALED                    the owner, lock-free CAS
 *   CREATING -> DELETING                  the store (abort, or the owner died)
 *   SEALED -> DELETING | EVICTING         the store, lock-free CAS
 *   EVICTING -> SEALED                    the store, when a pin raced the eviction
 *   EVICTING -> SPILLED                   the store, once the bytes are on disk and freed
 *   SPILLED -> SEALED                     the store, after reading them back (new offset)
 *   SPILLED -> DELETING                   the store (delete of a spilled object)
 *   DELETING|EVICTING|CLAIMED -> TOMB     the store, after freeing the memory
 *   TOMB -> FREE                          writer-lock holder, only when the next slot is FREE
 */
enum ferry__plasma_state {
	FERRY__PLASMA_FREE = 0,	    /* never used since the last cleanup: ends a probe */
	FERRY__PLASMA_TOMB = 1,	    /* removed: probes continue past it, inserts reuse it */
	FERRY__PLASMA_CLAIMED = 2,  /* being filled in under the writer lock: fields invalid */
	FERRY__PLASMA_CREATING = 3, /* visible; the owner is writing the bytes */
	FERRY__PLASMA_SEALED = 4,   /* immutable; readers pin it */
	FERRY__PLASMA_DELETING = 5, /* no new pins; freed once no client pins it */
	FERRY__PLASMA_EVICTING = 6, /* the store checks for pins: back to SEALED, or freed */
	FERRY__PLASMA_SPILLED = 7,  /* on disk only: offset invalid, no pins; get asks the store */
};

#define FERRY__PLASMA_F_PRIMARY 0x1u /* the primary copy (not evictable; spilled instead) */

/*
 * The entry word: state | flags << 8 | owner << 16 | generation << 32. Only the state changes
 * within a generation, and a generation never repeats for a slot (until 2^32 reuses), so a
 * reader that loads the same word twice knows that the entry did not change in between.
 */
static inline uint64_t ferry__plasma_word(unsigned state, unsigned flags, unsigned owner,
					  uint32_t gen)
{
	return (uint64_t)state | (uint64_t)(flags & 0xff) << 8 | (uint64_t)(owner & 0xffff) << 16 |
	       (uint64_t)gen << 32;
}

static inline unsigned ferry__plasma_word_state(uint64_t w)
{
	return (unsigned)(w & 0xff);
}

static inline unsigned ferry__plasma_word_flags(uint64_t w)
{
	return (unsigned)(w >> 8 & 0xff);
}

static inline unsigned ferry__plasma_word_owner(uint64_t w)
{
	return (unsigned)(w >> 16 & 0xffff);
}

static inline uint32_t ferry__plasma_word_gen(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

static inline uint64_t ferry__plasma_word_with_state(uint64_t w, unsigned state)
{
	return (w & ~0xffull) | state;
}

/* One object. 64 bytes: a lookup and a first pin touch one cache line. */
struct ferry__plasma_entry {
	_Atomic uint64_t word;	  /* state, flags, owner slot, generation (above) */
	_Atomic uint64_t pins[2]; /* bit c set: client slot c holds pins (its counts: its slot) */
	_Atomic uint64_t id_lo;	  /* ObjectID bytes 0-7 */
	_Atomic uint64_t id_mid;  /* ObjectID bytes 8-15 */
	_Atomic uint32_t id_hi;	  /* ObjectID bytes 16-19 */
	uint32_t metadata_size;	  /* metadata bytes, stored right after the data */
	uint64_t offset;	  /* data offset in the arena, 64-byte aligned */
	uint64_t data_size;	  /* data bytes */
};
_Static_assert(sizeof(struct ferry__plasma_entry) == 64, "entry is one cache line");

/* Per-entry fields off the lookup path. */
struct ferry__plasma_entry_ext {
	_Atomic uint32_t lru_stamp; /* header lru_clock when last first-pinned (or created) */
	uint32_t chunk;		    /* 1 + index of the client chunk holding the bytes; 0: none */
	/* This placement of the bytes: from the header's alloc_seq, set when the entry is claimed
	 * and again when a spilled object is read back to new memory. Unlike (index, gen), which
	 * a restore keeps, it never names two placements, so a peer that READ the bytes at an
	 * offset before pinning can tell from a pin naming the same alloc that they were the
	 * object's all along (transport/objmgr_rdma.c). */
	uint64_t alloc;
	/* The worker or driver that owns the object (nil: the node), set with the claim: an owner
	 * named here needs no round trip for a create in the client's chunk, and off the entry's
	 * cache line it costs a get nothing. Fixed for the entry's generation. */
	struct ferry_worker_id owner_id;
};
_Static_assert(sizeof(struct ferry__plasma_entry_ext) == 32, "entry ext is 32 bytes");

/* What one client holds on one entry. Written only by that client. */
struct ferry__plasma_pin_record {
	_Atomic uint32_t entry; /* entry index + 1; 0: empty record */
	_Atomic uint32_t gen;	/* entry generation when pinned */
	_Atomic uint32_t count; /* pins held */
	uint32_t reserved;	/* zero */
};

enum ferry__plasma_client_state {
	FERRY__PLASMA_CLIENT_FREE = 0, /* slot unused */
	FERRY__PLASMA_CLIENT_LIVE = 1, /* a connected client (or the store itself, slot 0) */
	FERRY__PLASMA_CLIENT_DEAD = 2, /* died; the store is taking its pins and objects back */
};

/* A client slot: its chunk for local creates and its pin records (pin_records follow). */
struct ferry__plasma_client {
	_Atomic uint32_t state; /* enum ferry__plasma_client_state (store writes) */
	int32_t pid;		/* client process, for logs */
	_Atomic uint32_t chunk; /* 1 + current chunk index; 0: none (store writes, release) */
	_Atomic uint32_t records_used; /* pin records in use (client writes) */
	uint64_t chunk_offset;	       /* current chunk: first byte in the arena (store writes) */
	uint64_t chunk_size;	       /* current chunk: bytes (store writes) */
	_Atomic uint64_t chunk_used;   /* bytes of the chunk handed out (client writes) */
	uint64_t reserved[3];	       /* zero; pads the slot head to a cache line */
	struct ferry__plasma_pin_record records[]; /* pin_records of them, open addressing */
};
_Static_assert(sizeof(struct ferry__plasma_client) == 64, "client slot head is a cache line");

struct ferry__plasma_header {
	uint64_t magic;		 /* FERRY__PLASMA_MAGIC once formatted */
	uint32_t version;	 /* FERRY__PLASMA_LAYOUT_VERSION */
	uint32_t header_size;	 /* sizeof(struct ferry__plasma_header) */
	uint64_t region_size;	 /* bytes of the control region */
	uint64_t arena_size;	 /* bytes of the arena */
	uint32_t table_slots;	 /* entries, a power of two */
	uint32_t max_objects;	 /* live entries allowed */
	uint32_t max_used_slots; /* non-free slots allowed (objects and tombstones) */
	uint32_t max_clients;	 /* client slots, <= FERRY__PLASMA_MAX_CLIENTS */
	uint32_t pin_records;	 /* pin records per client slot, a power of two */
	uint32_t max_chunks;	 /* chunk live counters */
	uint64_t entries_offset; /* section offsets from the region start */
	uint64_t ext_offset;	 /* ... */
	uint64_t clients_offset; /* ... */
	uint64_t client_stride;	 /* bytes per client slot */
	uint64_t chunks_offset;	 /* ... */
	int32_t store_pid;	 /* the store process */
	uint32_t reserved;	 /* zero */
	/* Robust, process-shared: serialises claims of free slots and tombstone cleanup. Readers
	 * never take it. A holder that dies leaves at most one CLAIMED entry behind. */
	pthread_mutex_t writer_lock __attribute__((aligned(64)));
	_Atomic uint32_t lru_clock __attribute__((aligned(64))); /* bumped by the store */
	_Atomic uint32_t seal_waiters; /* > 0: the store waits for seals; sealers notify it */
	_Atomic uint32_t seal_getters; /* of those, parked gets and waits: notify at once (the
					* others, hooks and subscribers, accept a delay) */
	_Atomic uint32_t used_slots __attribute__((aligned(64))); /* non-free slots (lock) */
	_Atomic uint32_t live_objects;				  /* CLAIMED..EVICTING entries */
	_Atomic uint64_t seal_seq;  /* bumped by every seal: the store can spot local seals */
	_Atomic uint64_t alloc_seq; /* the last entry_ext.alloc handed out */
};

#endif
