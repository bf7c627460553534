/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma store server: the store core (plasma/store.h) behind a Unix socket, on its own
 * io_uring loop or on a loop it is given. ferry-plasma (plasma/main.c) runs one on its own loop;
 * the node daemon embeds one on the node's loop.
 *
 * Thread model: create/start/stop/destroy from one controlling thread. While started, the
 * server's own thread runs the loop and every store call; nothing else touches the store. On a
 * given loop (opts.loop) the thread that runs that loop does, and there is no start/run: see
 * ferry__plasma_server_create().
 *
 * Hooks (for the node daemon's object manager): called on the server's thread (on a given loop:
 * that loop's thread), in the order things happen. They must not block and must not call into
 * this server or its store. Each may be NULL.
 *  - on_miss: a client's get or wait (through the socket, or a shared-memory get that fell
 *    back to waiting) found @id absent (not created, not spilled) and waits for it. Once per
 *    episode: not again for other waiters, or for the same client asking again, until the
 *    object is sealed here or nobody has waited for it for miss_quiet_ms. An object
 *    created here and then aborted while waited for is not reported again in that episode.
 *  - on_miss_end: the episode on_miss reported for @id is over (the object was sealed here,
 *    or nobody waited for it for miss_quiet_ms): whoever looks for it may stop.
 *  - on_sealed: once per sealed object, whoever sealed it (also clients sealing in shared
 *    memory: with a hook set, every sealer tells the store at once; a client that dies
 *    between its seal and that notice is caught when its connection closes). @place says
 *    where its bytes lie and, for a small object, what they hash to: for peers that read them
 *    one-sided (struct ferry__plasma_place). @owner: the worker or driver its creator
 *    named (nil: the node owns it).
 *  - on_moved: a sealed object reported by on_sealed was read back from spill to new memory:
 *    its new @place (the old one names memory it left).
 *  - on_removed: a sealed object left the store (deleted, or a secondary copy evicted), after
 *    its on_sealed. Spilling and restoring are not removals; aborts of unsealed objects are
 *    not reported. An object deleted before the store heard of its seal gets neither call.
 */
#ifndef FERRY_PLASMA_SERVER_H
#define FERRY_PLASMA_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/plasma.h>

struct ferry__plasma_server;

/* The largest object (data + metadata) whose place carries a content check. */
#define FERRY__PLASMA_CHECK_MAX (64u << 10)

/*
 * Where a sealed object's bytes lie, as the hooks report it. The check lets a peer that READ
 * the bytes without asking us (transport/objmgr_rdma.c) know they were the object's: the
 * memory may have been freed and reused meanwhile, which the hash of what it read then shows.
 * It is computed on the store's thread, the only one that frees arena memory, while the
 * object is sealed, so it hashes the object's own bytes.
 */
struct ferry__plasma_place {
	uint64_t offset; /* the data's arena offset (metadata right after it) */
	uint64_t alloc;	 /* the placement's id (layout.h): a restore from spill changes it */
	uint64_t check;	 /* ferry__hash_content() of data + metadata, when they are at most
			  * FERRY__PLASMA_CHECK_MAX bytes and opts.content_checks; 0: none */
};

struct ferry__loop;

struct ferry__plasma_server_opts {
	struct ferry__loop *loop; /* serve on this loop, run by the caller; NULL: own */
	const char *socket_path;  /* Unix socket; NULL: no listener (tests, fuzz) */
	uint64_t memory_bytes;	  /* arena; 0: ferry_plasma_default_memory_bytes() */
	enum ferry_plasma_hugepages hugepages; /* arena page policy */
	const char *spill_dir;		       /* spill primaries here; NULL: never spill */
	uint32_t spill_threshold_pct;	       /* usage that starts spilling; 0: 80 */
	uint64_t spill_max_bytes;	       /* spill space allowed; 0: the disk's */
	uint32_t max_clients;		       /* client slots incl. the store's; 0: 64 */
	uint32_t max_objects;		       /* 0: one per 64 KiB of arena, 4096 .. 2^20 */
	uint64_t chunk_bytes;		       /* default client chunk; 0: 1 MiB, <= arena/256 */
	uint32_t tick_ms;		       /* collect / spill check period; 0: 100 */
	unsigned store_flags;		       /* FERRY__PLASMA_STORE_* (tests: NO_PREFAULT) */
	void (*on_miss)(void *arg, const struct ferry_object_id *id);	  /* see above */
	void (*on_miss_end)(void *arg, const struct ferry_object_id *id); /* see above */
	void (*on_sealed)(void *arg, const struct ferry_object_id *id, uint64_t data_size,
			  uint32_t metadata_size, bool primary, const struct ferry_worker_id *owner,
			  const struct ferry__plasma_place *place);	 /* see above */
	void (*on_removed)(void *arg, const struct ferry_object_id *id); /* see above */
	void (*on_moved)(void *arg, const struct ferry_object_id *id, uint64_t data_size,
			 uint32_t metadata_size,
			 const struct ferry__plasma_place *place); /* see above */
	void *hook_arg;						   /* for the hooks */
	uint32_t miss_quiet_ms; /* on_miss episode ends this long after its last wait; 0: 1000 */
	bool content_checks; /* places carry content checks (a store peers READ from one-sided) */
	/* Slots one uid may hold, connected or parked until its process exits; 0: half the
	 * client slots. Root and the store's own uid are not capped (server_peers.c). */
	uint32_t max_clients_per_uid;
	/*
	 * Connections that have not sent PlasmaConnect (or PlasmaSubscribe) yet: their frames
	 * are capped at FERRY__PLASMA_CONNECT_MAX_BYTES, they are closed @connect_timeout_ms
	 * after accept (0: 10 s; checked every tick), and at most @max_connecting wait at once
	 * (0: 64): a new one past it closes the oldest, so a flood cannot lock clients out.
	 */
	uint32_t connect_timeout_ms;
	uint32_t max_connecting;
	/* Every connection's limits (struct ferry__conn_opts; 0: FERRY_CONN_SERVER_DEFAULT_*):
	 * a frame begun and idle this long closes it; replies unsent past these. */
	uint32_t frame_timeout_ms;
	uint64_t max_queued_bytes;
	uint32_t stall_timeout_ms;
};

/* The largest frame before PlasmaConnect: a PlasmaConnect or PlasmaSubscribe fits with room. */
#define FERRY__PLASMA_CONNECT_MAX_BYTES (16u << 10)

/*
 * ferry__plasma_server_create() - create the store and the loop and start listening (the socket
 * path is replaced if a dead server left it). Nothing is served until start() or run().
 * Returns 0, -EINVAL (bad options, logged), -ENOMEM, -EADDRINUSE, or -errno from the store or
 * the loop. *@out is written only on success.
 *
 * On a given loop (opts.loop): call before that loop runs, on the thread that sets it up (or on
 * its thread); it is served as soon as the caller runs the loop; start() and run() return
 * -EINVAL. To end it: stop the loop's thread, call ferry__plasma_server_stop() (the store's
 * background spill stops posting to the loop), destroy the loop (the connections close, each
 * client is cleaned up against the store), then ferry__plasma_server_destroy().
 */
int ferry__plasma_server_create(const struct ferry__plasma_server_opts *opts,
				struct ferry__plasma_server **out);

/* ferry__plasma_server_start() - run the loop on a new thread. Returns 0 or -errno. */
int ferry__plasma_server_start(struct ferry__plasma_server *srv);

/* ferry__plasma_server_run() - run the loop on this thread until ferry__plasma_server_stop().
 * Returns 0 or -errno from the loop. */
int ferry__plasma_server_run(struct ferry__plasma_server *srv);

/* ferry__plasma_server_stop() - make run() return (any thread, async-signal-unsafe), or stop
 * and join the thread of start(). On a given loop: stop the background work that posts to it
 * (the loop must not run any more). */
void ferry__plasma_server_stop(struct ferry__plasma_server *srv);

/*
 * ferry__plasma_server_destroy() - stop if running, close every connection (their clients are
 * cleaned up as if they had died), unlink the socket, free the store: no shared memory
 * remains once the clients unmap it. Accepts NULL.
 */
void ferry__plasma_server_destroy(struct ferry__plasma_server *srv);

/* Convenience: create + start. */
static inline int ferry__plasma_server_start_new(const struct ferry__plasma_server_opts *opts,
						 struct ferry__plasma_server **out)
{
	struct ferry__plasma_server *srv;
	int r = ferry__plasma_server_create(opts, &srv);

	if (r < 0)
		return r;
	r = ferry__plasma_server_start(srv);
	if (r < 0) {
		ferry__plasma_server_destroy(srv);
		return r;
	}
	*out = srv;
	return 0;
}

/*
 * ferry__plasma_server_get_on_loop() - for a client in this process whose caller runs on the
 * server's loop thread (the node's object manager, which answers other nodes' pulls there):
 * ferry_plasma_client_get() of @id with timeout 0 without the round trip to this server, which
 * on its own thread would never be answered. A sealed object in memory is pinned from the
 * shared index through @c's slot at once; for a spilled one, a restore starts (the disk is
 * read on the store's disk helper thread, never on this one; its batch-mates come along) and
 * the call returns -EBUSY: ask again, it is there once the restore is published (a store with
 * no loop to post to reads it on this thread instead). Loop thread only. Returns 0 and
 * *@view (release it with ferry_plasma_client_release()), -ENOENT (absent, not sealed yet, or
 * being deleted), -EBUSY (being read back, changing, or @c's pin records are full: ask again
 * later), -EINVAL, or -errno of a restore that could not start (-ENOSPC, -ENOMEM; logged).
 */
int ferry__plasma_server_get_on_loop(struct ferry__plasma_server *srv,
				     struct ferry_plasma_client *c,
				     const struct ferry_object_id *id,
				     struct ferry_plasma_view *view);

/*
 * ferry__plasma_server_delete_owned() - delete every sealed (or spilled) object whose owner is
 * @owner, as a client's delete would (pinned ones go at their last release): what a node does
 * when the driver or worker that owned them died. Loop thread only. Returns how many.
 */
int ferry__plasma_server_delete_owned(struct ferry__plasma_server *srv,
				      const struct ferry_worker_id *owner);

/*
 * ferry__plasma_server_delete_if_owned() - delete sealed (or spilled) object @id if @owner owns
 * it, as a client's delete would (a pinned one goes at its last release): a copy freed by its
 * owner on another node. Loop thread only. Returns 0 (freed), 1 (pinned: freed at the last
 * release), -ENOENT, -EBUSY (being created or deleted), -EPERM (another owner's).
 */
int ferry__plasma_server_delete_if_owned(struct ferry__plasma_server *srv,
					 const struct ferry_object_id *id,
					 const struct ferry_worker_id *owner);

/*
 * ferry__plasma_server_list_reply(), ferry__plasma_server_stats_reply() - build into @fb the
 * PlasmaListReply to a PlasmaList (@payload, verified) or the PlasmaStatsReply echoing @seq,
 * as the store's socket answers them: for those who answer on another socket (the node's
 * operator queries, node/rt_admin.c). Loop thread only. 0, or the builder's -errno.
 */
struct ferry__fb_builder;
int ferry__plasma_server_list_reply(struct ferry__plasma_server *srv, struct ferry__fb_builder *fb,
				    const void *payload);
int ferry__plasma_server_stats_reply(struct ferry__plasma_server *srv, struct ferry__fb_builder *fb,
				     uint64_t seq);

/* The store's rows of a metrics scrape (common/metrics.h): bytes, objects, evictions, spills
 * and restores. Loop thread only. */
struct ferry__metric_buf;
void ferry__plasma_server_metrics(struct ferry__plasma_server *srv, struct ferry__metric_buf *b);

/* The store (tests only: touch it only while the server is not running). */
struct ferry__plasma_store *ferry__plasma_server_store(struct ferry__plasma_server *srv);
/* The loop it serves on (its own, or the one it was given). */
struct ferry__loop *ferry__plasma_server_loop(struct ferry__plasma_server *srv);

#endif
