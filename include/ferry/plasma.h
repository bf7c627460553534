/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plasma, the node's zero-copy shared-memory object store, and its client.
 *
 * A store (the ferry-plasma process, or the node daemon) owns one arena of shared memory. A
 * client connects to its Unix socket once and maps the arena and the object index; from then on
 * it reads sealed objects in place: get and release of a sealed object, and create and seal
 * of an object that fits the client's arena chunk, take no round trip to the store (a lock-free
 * index in shared memory). The socket carries what must wait (an object not sealed yet), what
 * changes the store (large creates, deletes, evictions) and crash cleanup: when a client
 * process dies, the store takes back its pins and aborts the objects it was creating.
 *
 * Object life: create (writable buffer) -> write -> seal (immutable, visible to every client)
 * -> get (read-only view, pinned) ... release -> delete. An object is never moved or freed
 * while pinned. Under memory pressure, unpinned secondary copies are evicted and unpinned
 * primary copies spilled to disk; get restores a spilled object transparently.
 *
 * Thread model: a client handle may be used from any number of threads at once. Shared-memory
 * operations take a short per-client lock; requests to the store are multiplexed on the one
 * socket, so a thread blocked in get() does not hold up another thread's request. A handle
 * must not be used after fork() in the child (connect again there). The value-type functions
 * here are thread-safe.
 */
#ifndef FERRY_PLASMA_H
#define FERRY_PLASMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/common.h>
#include <ferry/id.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every object's data starts on this boundary inside the arena (a cache line: no false
 * sharing between objects, and aligned for any vector load). */
#define FERRY_PLASMA_ALIGNMENT 64

/*
 * Upper bound of the default arena size. The default is 30% of the memory this process may use
 * (physical RAM or the cgroup limit, whichever is lower), capped here: the arena is pre-faulted
 * at start, and populating fresh shared pages runs at ~1-2.5 GB/s per machine, so 64 GiB
 * already takes tens of seconds. Larger stores are a deliberate choice (FERRY_PLASMA_MEMORY).
 */
#define FERRY_PLASMA_DEFAULT_MEMORY_CAP (64ull << 30)

/* Hugepage policy for the arena. */
enum ferry_plasma_hugepages {
	FERRY_PLASMA_HUGEPAGES_AUTO = 0,    /* explicit hugetlb, else THP, else 4 KiB; logged */
	FERRY_PLASMA_HUGEPAGES_OFF = 1,	    /* base pages only */
	FERRY_PLASMA_HUGEPAGES_REQUIRE = 2, /* explicit hugetlb pages or fail with -ENOMEM */
};

/* What the arena actually got. */
enum ferry_plasma_pages {
	FERRY_PLASMA_PAGES_BASE = 0,	/* 4 KiB pages */
	FERRY_PLASMA_PAGES_THP = 1,	/* transparent hugepages requested (the kernel decides) */
	FERRY_PLASMA_PAGES_HUGETLB = 2, /* explicit hugetlb pages (size in page_size_bytes) */
};

/* Store figures. Fragmentation: free_bytes spread over free_blocks, the largest of which is
 * largest_free_bytes (the biggest object that can be created without eviction). */
struct ferry_plasma_stats {
	uint64_t capacity_bytes;	/* arena size */
	uint64_t allocated_bytes;	/* held by objects and client chunks, 64-byte granular */
	uint64_t free_bytes;		/* capacity_bytes - allocated_bytes */
	uint64_t largest_free_bytes;	/* largest free block */
	uint64_t free_blocks;		/* number of free blocks */
	uint64_t objects;		/* entries being created, sealed or awaiting deletion */
	uint64_t max_objects;		/* object limit */
	uint64_t table_slots_used;	/* index slots not free (objects + tombstones) */
	uint64_t table_slots;		/* index slots */
	uint64_t clients;		/* client slots in use (the store itself included) */
	uint64_t chunks;		/* arena chunks granted to clients for local creates */
	uint64_t chunk_bytes;		/* bytes in those chunks */
	uint64_t deferred_deletes;	/* deleted while pinned, freed at the last release */
	uint64_t evicted_objects;	/* secondary copies evicted since start */
	uint64_t evicted_bytes;		/* their data + metadata bytes */
	uint64_t spilled_objects;	/* primaries on disk only now */
	uint64_t spilled_bytes;		/* their data + metadata bytes */
	uint64_t spilled_total_objects; /* spilled since start */
	uint64_t spilled_total_bytes;	/* their bytes */
	uint64_t restored_objects;	/* read back from disk since start */
	uint64_t restored_bytes;	/* their bytes */
	uint64_t spill_files;		/* spill files open */
	uint64_t spill_disk_bytes;	/* their size on disk */
	uint32_t page_size_bytes;	/* arena page size (4096, or the hugetlb page size) */
	uint32_t pages;			/* enum ferry_plasma_pages */
};

/*
 * ferry_plasma_default_memory_bytes() - the arena size used when none is configured: 30% of
 * min(physical RAM, cgroup memory limit), rounded down to 2 MiB, at most
 * FERRY_PLASMA_DEFAULT_MEMORY_CAP and at least 64 MiB.
 */
FERRY_API uint64_t ferry_plasma_default_memory_bytes(void);

/* ---- the client ---- */

struct ferry_plasma_client;

/* Connect options; all zeros is the default. */
struct ferry_plasma_connect_opts {
	const char *name;     /* shown in the store's log; NULL: "client" */
	uint64_t chunk_bytes; /* arena chunk for round-trip-free creates; 0: the store's default */
	unsigned wait_ms;     /* retry this long while the socket is missing or refusing */
	unsigned flags;	      /* FERRY_PLASMA_CONNECT_* */
	/* The worker or driver that owns what this client creates, unless a call names another
	 * (ferry_plasma_client_create_owned). Nil (the default): the node owns it; the node
	 * records it in the object directory under a worker ID equal to the node ID, and it
	 * outlives this client (no random ID is made up: nobody could ever report its death). */
	struct ferry_worker_id owner;
};

/* Map the arena's page tables at connect (slower connect, no page faults on first use). */
#define FERRY_PLASMA_CONNECT_POPULATE (1u << 0)

/*
 * ferry_plasma_client_connect() - connect to the store serving @socket_path and map its
 * memory. @opts may be NULL. Returns 0 and *@out, or -ENOENT / -ECONNREFUSED (no store there,
 * after @opts->wait_ms), -EUSERS (the store has no free client slot), -EPROTO (not a plasma
 * store, or another shared-memory layout version), -ENOMEM, or another -errno.
 */
FERRY_API int ferry_plasma_client_connect(const char *socket_path,
					  const struct ferry_plasma_connect_opts *opts,
					  struct ferry_plasma_client **out);

/*
 * ferry_plasma_client_disconnect() - tell the store goodbye, unmap, close. Every view and
 * create buffer of this client becomes invalid; pins still held are given back and objects
 * still being created are aborted. No other thread may use @c during or after the call.
 * Accepts NULL.
 */
FERRY_API void ferry_plasma_client_disconnect(struct ferry_plasma_client *c);

/* Create flags (ferry_plasma_client_create_ex). */
#define FERRY_PLASMA_CREATE_SECONDARY (1u << 0) /* a copy of a remote primary: evictable */
#define FERRY_PLASMA_CREATE_NO_EVICT (1u << 1)	/* -ENOSPC rather than evict or spill */

/*
 * ferry_plasma_client_create() - create object @id of @data_size bytes with @metadata_size
 * bytes of @metadata (copied) and return its writable data in *@data (64-byte aligned; the
 * metadata follows the data). A NULL @metadata leaves its @metadata_size bytes at
 * *@data + @data_size for the caller to write (a copy whose metadata is still on its way). Write
 * it, then seal or abort. Until then
 * nobody else sees the object, and the buffer stays valid. A primary copy: never evicted,
 * spilled to disk under pressure. Small objects are created in the client's arena chunk with
 * no round trip. Returns 0, -EEXIST (@id exists, sealed or not), -E2BIG (larger than the
 * store), -ENOSPC (full after eviction and spilling), -ENOMEM, -ECONNRESET (store gone).
 */
FERRY_API int ferry_plasma_client_create(struct ferry_plasma_client *c,
					 const struct ferry_object_id *id, uint64_t data_size,
					 const void *metadata, uint32_t metadata_size, void **data);

/* ferry_plasma_client_create_ex() - create() with FERRY_PLASMA_CREATE_* @flags. */
FERRY_API int ferry_plasma_client_create_ex(struct ferry_plasma_client *c,
					    const struct ferry_object_id *id, uint64_t data_size,
					    const void *metadata, uint32_t metadata_size,
					    unsigned flags, void **data);

/*
 * ferry_plasma_client_create_owned() - create_ex() naming the object's owner: the worker or
 * driver that put it, or the submitter of the task that returns it. The store keeps @owner with
 * the object (ferry_plasma_client_list shows it) and the node's object directory records it.
 * @owner NULL: the client's own (ferry_plasma_connect_opts.owner); a nil @owner: the node owns
 * the object (as for a client connected without one). A small create still takes no round
 * trip. Same errors as create().
 */
FERRY_API int ferry_plasma_client_create_owned(struct ferry_plasma_client *c,
					       const struct ferry_object_id *id, uint64_t data_size,
					       const void *metadata, uint32_t metadata_size,
					       unsigned flags, const struct ferry_worker_id *owner,
					       void **data);

/*
 * ferry_plasma_client_seal() - make object @id, which this client created, immutable and
 * visible; waiters are woken. The create buffer must not be written after. Returns 0, -ENOENT
 * (no such object being created), -EPERM (another client's object), -EALREADY (sealed).
 */
FERRY_API int ferry_plasma_client_seal(struct ferry_plasma_client *c,
				       const struct ferry_object_id *id);

/* ferry_plasma_client_abort() - discard object @id, which this client is creating. Returns 0,
 * -ENOENT (not being created), -EPERM (another client's object), -ECONNRESET. */
FERRY_API int ferry_plasma_client_abort(struct ferry_plasma_client *c,
					const struct ferry_object_id *id);

/* ferry_plasma_client_put() - create, copy @size bytes of @data in, seal. Same errors. */
FERRY_API int ferry_plasma_client_put(struct ferry_plasma_client *c,
				      const struct ferry_object_id *id, const void *data,
				      uint64_t size, const void *metadata, uint32_t metadata_size);

/* ferry_plasma_client_put_owned() - put() with FERRY_PLASMA_CREATE_* @flags and @owner as in
 * create_owned() (NULL: the client's own; nil: the node). Same errors. */
FERRY_API int ferry_plasma_client_put_owned(struct ferry_plasma_client *c,
					    const struct ferry_object_id *id, const void *data,
					    uint64_t size, const void *metadata,
					    uint32_t metadata_size, unsigned flags,
					    const struct ferry_worker_id *owner);

/* A read-only, zero-copy view of a sealed object, pinned until released. */
struct ferry_plasma_view {
	const void *data;	   /* NULL when status != 0 */
	uint64_t data_size;	   /* bytes at data */
	const void *metadata;	   /* right after the data; NULL when status != 0 */
	uint32_t metadata_size;	   /* bytes at metadata */
	int status;		   /* 0, -ETIMEDOUT (not sealed in time), -ENOSPC, ... */
	struct ferry_object_id id; /* the object */
	uint32_t handle_index;	   /* private: index entry */
	uint32_t handle_gen;	   /* private: entry generation */
	uint32_t handle_flags;	   /* private: how the pin was taken */
};

/*
 * ferry_plasma_client_get() - views of objects @ids[0..@n) into @views. Sealed local objects
 * are pinned in shared memory with no round trip; the rest are waited for, up to @timeout_ms
 * (< 0: forever; 0: no waiting), through the store (spilled objects are restored). Returns 0
 * when every view has status 0; -ETIMEDOUT when some are missing (their data is NULL and status
 * -ETIMEDOUT, or another -errno; the others are valid and must be released); or, with no view
 * valid, -EINVAL, -ENOMEM, -ECONNRESET. A view stays valid until released.
 */
FERRY_API int ferry_plasma_client_get(struct ferry_plasma_client *c,
				      const struct ferry_object_id *ids, size_t n,
				      int64_t timeout_ms, struct ferry_plasma_view *views);

/* ferry_plasma_client_release() - drop the pin of @view (from get with status 0) and clear
 * it; data must not be read after. Returns 0, or -ENOENT if it holds no pin. */
FERRY_API int ferry_plasma_client_release(struct ferry_plasma_client *c,
					  struct ferry_plasma_view *view);

/* ferry_plasma_client_contains() - 1 if @id is sealed in this store (in memory or spilled),
 * 0 if not. Shared memory only: no round trip. */
FERRY_API int ferry_plasma_client_contains(struct ferry_plasma_client *c,
					   const struct ferry_object_id *id);

/*
 * ferry_plasma_client_wait() - wait until @num_ready (0: all) of @ids[0..@n) are sealed, or
 * @timeout_ms passes (< 0: forever). @ready (may be NULL) gets true for each sealed one.
 * Nothing is pinned. Returns how many are sealed (>= 0), or -errno.
 */
FERRY_API int ferry_plasma_client_wait(struct ferry_plasma_client *c,
				       const struct ferry_object_id *ids, size_t n,
				       size_t num_ready, int64_t timeout_ms, bool *ready);

/*
 * ferry_plasma_client_delete() - delete sealed objects @ids[0..@n). A pinned object goes when
 * its last pin is released (no new pins meanwhile). @statuses (may be NULL) gets each result:
 * 0, -ENOENT, -EBUSY (still being created). Returns 0 if all were 0, else the first error.
 */
FERRY_API int ferry_plasma_client_delete(struct ferry_plasma_client *c,
					 const struct ferry_object_id *ids, size_t n,
					 int *statuses);

/* ferry_plasma_client_evict() - free @bytes of arena: unpinned secondary copies, least
 * recently used first, then spill unpinned primaries. *@freed (may be NULL) gets the bytes
 * freed. Returns the number of objects evicted or spilled, or -errno. */
FERRY_API int ferry_plasma_client_evict(struct ferry_plasma_client *c, uint64_t bytes,
					uint64_t *freed);

enum ferry_plasma_object_state {
	FERRY_PLASMA_OBJECT_CREATING = 1, /* being written */
	FERRY_PLASMA_OBJECT_SEALED = 2,	  /* in memory */
	FERRY_PLASMA_OBJECT_DELETING = 3, /* deleted, waiting for its last pin */
	FERRY_PLASMA_OBJECT_SPILLED = 4,  /* on disk only */
};

struct ferry_plasma_object_info {
	struct ferry_object_id id;	      /* the object */
	enum ferry_plasma_object_state state; /* see the enum */
	bool primary;			      /* primary copy (else an evictable secondary) */
	uint64_t data_size;		      /* data bytes */
	uint64_t metadata_size;		      /* metadata bytes */
	uint32_t pin_count;		      /* pins held, all clients */
	uint32_t lru_stamp;	      /* store clock at its last first pin (larger: newer) */
	struct ferry_worker_id owner; /* the worker or driver that owns it; nil: the node */
};

/*
 * ferry_plasma_client_list() - every sealed or spilled object (and, with @unsealed, those
 * being created or deleted), in ID order, into *@objects (free with ferry_plasma_list_free)
 * and *@count. Returns 0 or -errno.
 */
FERRY_API int ferry_plasma_client_list(struct ferry_plasma_client *c, bool unsealed,
				       struct ferry_plasma_object_info **objects, size_t *count);
FERRY_API void ferry_plasma_list_free(struct ferry_plasma_object_info *objects);

/* ferry_plasma_client_stats() - the store's figures. Returns 0 or -errno. */
FERRY_API int ferry_plasma_client_stats(struct ferry_plasma_client *c,
					struct ferry_plasma_stats *out);

/* ---- notifications ---- */

/*
 * A subscription tells of objects sealed in the store and of sealed objects leaving it, in the
 * order the store saw them, through a connection of its own (Ray's model): poll its fd, then
 * read. The store buffers a bounded number of events per subscriber (max_pending); a
 * subscriber that reads too slowly loses the events that do not fit and is told how many
 * (never does the store's memory grow with a slow reader).
 *
 * What is reported: every seal made after the subscription started (by any client, in shared
 * memory or through the socket); a seal concurrent with ferry_plasma_client_subscribe() may
 * or may not be. A removal (delete, eviction) is reported for every object sealed while the
 * subscription runs or already sealed when it started, except for an object deleted before
 * the store heard of its seal (then neither event comes). Spills and restores are not
 * reported: a spilled object is still in the store.
 *
 * Thread model: a subscription is independent of its client (it may outlive it) and is used
 * by one thread at a time.
 */
enum ferry_plasma_event_kind {
	FERRY_PLASMA_EVENT_SEALED = 0,	/* an object was sealed */
	FERRY_PLASMA_EVENT_DELETED = 1, /* a sealed object was deleted */
	FERRY_PLASMA_EVENT_EVICTED = 2, /* a sealed secondary copy was evicted */
};

struct ferry_plasma_event {
	struct ferry_object_id id; /* the object */
	uint64_t data_size;	   /* data bytes */
	uint32_t metadata_size;	   /* metadata bytes */
	uint8_t kind;		   /* enum ferry_plasma_event_kind */
	bool primary;		   /* the primary copy (else a secondary) */
};

/* Subscribe options; all zeros is the default. */
struct ferry_plasma_subscribe_opts {
	unsigned events;      /* 1 << FERRY_PLASMA_EVENT_* per kind wanted; 0: every kind */
	uint32_t max_pending; /* events the store holds for us; 0: 4096; 16 .. 65536 */
};

struct ferry_plasma_subscription;

/*
 * ferry_plasma_client_subscribe() - open a subscription to the store @c is connected to.
 * @opts may be NULL. Returns 0 and *@out, or -ENOMEM, -ECONNRESET / -ENOENT (the store is
 * gone), -EPROTO, or another -errno. Any thread.
 */
FERRY_API int ferry_plasma_client_subscribe(struct ferry_plasma_client *c,
					    const struct ferry_plasma_subscribe_opts *opts,
					    struct ferry_plasma_subscription **out);

/*
 * ferry_plasma_subscription_fd() - a file descriptor that polls readable (POLLIN) when events
 * may be waiting. Events already received are kept in the subscription: after a wake-up, call
 * ferry_plasma_subscription_read() with timeout 0 until it returns 0 before polling again.
 * The fd belongs to the subscription (do not read it or close it).
 */
FERRY_API int ferry_plasma_subscription_fd(const struct ferry_plasma_subscription *s);

/*
 * ferry_plasma_subscription_read() - up to @max events into @events, waiting up to
 * @timeout_ms for the first (0: do not wait; < 0: forever). *@missed (may be NULL) gets the
 * number of events lost since the previous read because we read too slowly (the events
 * returned come after the loss). Returns the number of events (0: none within the timeout, or
 * only a loss to report),
 * -ECONNRESET (the store went away), -EPROTO (a malformed message), -ENOMEM, or -errno.
 */
FERRY_API int ferry_plasma_subscription_read(struct ferry_plasma_subscription *s,
					     struct ferry_plasma_event *events, size_t max,
					     int64_t timeout_ms, uint64_t *missed);

/* ferry_plasma_subscription_close() - end the subscription and free it. Accepts NULL. */
FERRY_API void ferry_plasma_subscription_close(struct ferry_plasma_subscription *s);

#ifdef __cplusplus
}
#endif
#endif
