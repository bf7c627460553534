/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager: moves sealed objects store-to-store between nodes. It serves pulls of
 * its own store's objects to other nodes and pulls objects its node lacks from the nodes that
 * the GCS object directory lists, over shared memory (two stores on one host), RDMA (one-sided
 * READs of the peer's registered arena) or TCP.
 *
 * Thread model: create/stop/destroy from one controlling thread. Every other function may be
 * called from any thread (not from inside a pull callback for the blocking ones). Pull
 * callbacks run on one of the object manager's pull threads.
 */
#ifndef FERRY_TRANSPORT_OBJMGR_H
#define FERRY_TRANSPORT_OBJMGR_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>

struct ferry__objmgr;
struct ferry__loop;
struct ferry__plasma_server;

/* Longest node address string (the GCS node record's `address`). */
#define FERRY__NODE_ADDR_MAX 256
/* Longest shm (store socket) path: a Unix socket path. */
#define FERRY__NODE_ADDR_PATH_MAX 108

/*
 * A node's address as advertised in the GCS: "ip=A;tcp=P;rdma=P;shm=PATH;host=BOOT_ID;run=R"
 * with keys in any order, each at most once, ip and host required, at least one of
 * tcp/rdma/shm. ip: a numeric IPv4 or IPv6 address; ports 1..65535; shm: an absolute path
 * without ';'; host: the kernel boot id (hex digits and '-'), which tells two nodes on one host
 * apart; run (optional): 1..16 lower-case hex digits, not all zero, random at each start of an
 * object manager, which tells a restarted node at the same store path or port from its
 * predecessor (whose cached connections then go).
 */
struct ferry__node_addr {
	char ip[48];				  /* numeric address */
	uint16_t tcp_port;			  /* 0: no TCP */
	uint16_t rdma_port;			  /* 0: no RDMA */
	uint16_t rt_port;			  /* runtime endpoint (rt=), 0: none */
	char shm_path[FERRY__NODE_ADDR_PATH_MAX]; /* "": no shm; the store's socket */
	char host[40];				  /* boot id */
	uint64_t run;				  /* this start of the node; 0: not given */
};

/* ferry__node_addr_parse() - parse @len bytes of @text strictly. 0 or -EINVAL (logged at
 * debug: the text is untrusted). An ip, a host and one transport or an rt= port are required:
 * "ip=A;rt=P;host=B" alone names a runtime endpoint (a worker's or an owner's socket on TCP). */
int ferry__node_addr_parse(const char *text, size_t len, struct ferry__node_addr *out);
/* ferry__node_addr_format() - the text form into @buf. Returns its length, -EINVAL (an invalid
 * field) or -ENOSPC (@size too small). */
int ferry__node_addr_format(const struct ferry__node_addr *a, char *buf, size_t size);
/* ferry__node_addr_transports() - FERRY_GCS_TRANSPORT_* bits the address offers. */
unsigned ferry__node_addr_transports(const struct ferry__node_addr *a);
/* ferry__host_boot_id() - this kernel's boot id into @buf (>= 40 bytes). 0 or -errno. */
int ferry__host_boot_id(char *buf, size_t size);

/* Options; zeros are defaults except store_socket, gcs (for pulls) and the token. */
/* The longest the loop's copies' seal notices may be held back (10 s). */
#define FERRY__OBJMGR_MAX_NOTICE_HOLD_MS 10000u

struct ferry__objmgr_opts {
	const char *store_socket;     /* this node's plasma store socket (required) */
	struct ferry_gcs_client *gcs; /* borrowed; must outlive ferry__objmgr_stop() */
	struct ferry_node_id node_id; /* this node */
	const void *token;	      /* cluster token (copied), required */
	size_t token_len;	      /* its bytes */
	const char *ip;		      /* listen and advertised address; NULL: 127.0.0.1 */
	uint16_t port;		      /* TCP listen port; 0: any free port */
	unsigned transports;	      /* FERRY_GCS_TRANSPORT_* served and used; 0: TCP | SHM */
	unsigned optional;	      /* of those, bits dropped (logged) when they cannot be set
				       * up here, e.g. RDMA without a device; else create fails */
	uint16_t rdma_port;	      /* RDMA listen port; 0: any free port */
	uint32_t rdma_chunk_bytes;    /* RDMA READ work request size; 0: 256 KiB */
	uint32_t rdma_depth;	      /* READs in flight per object part; 0: 8 */
	uint32_t rdma_qps;	      /* endpoints (QPs) per peer a large object is read over;
				       * 0: 2, at most 8 */
	int rdma_busy_poll;	      /* spin on the CQ while READs are in flight (latency for
				       * a core); 0: sleep on the completion channel */
	uint32_t spin_us;	      /* busy poll: the loop polls this long after its last
				       * completion before it sleeps, and so does a thread in
				       * ferry__objmgr_pull_wait/_all() for its result (latency for
				       * CPU while there is traffic); 0: always sleep */
	uint32_t chunk_bytes;	      /* TCP engine data frame; 0: 1 MiB, at most 4 MiB */
	uint32_t timeout_ms;	      /* deadline of one pull attempt from one node; 0: 30000 */
	uint32_t threads;	      /* pull threads at most; 0: 4 */
	uint32_t thread_idle_ms;      /* a pull thread without work this long leaves (one
				       * starts again when a pull queues); 0: 2000 */
	uint64_t max_bytes_in_flight; /* pull admission limit; 0: half the store's capacity */
	bool node_records_copies;     /* the embedding node records pulled copies (see pull) */
	uint32_t notice_hold_ms;      /* the loop's copies' seal notices wait up to this long
				       * (objmgr_fast.c); 0: 1, at most
				       * FERRY__OBJMGR_MAX_NOTICE_HOLD_MS */
	uint32_t max_queued_bytes;    /* serving: replies unsent to one puller before its
				       * requests wait (tcp.h); 0: 8 MiB */
	uint32_t stall_timeout_ms;    /* serving: a puller over that this long is dropped;
				       * 0: 30000 */
	/* A loop to serve on, already run by another thread (the node's); NULL: an own loop
	 * thread. Its spin window (ferry__loop_spin_us) replaces spin_us, waiters never drive it
	 * (its callbacks belong to its thread), and it must outlive ferry__objmgr_stop(). */
	struct ferry__loop *loop;
	/* With @loop, when the store behind store_socket is served on that loop: peers' pulls
	 * are answered from it with ferry__plasma_server_get_on_loop(), never a round trip to a
	 * store the waiting loop itself would have to answer. */
	struct ferry__plasma_server *store_server;
};

/* How a pull ended. */
struct ferry__objmgr_result {
	struct ferry_object_id id;   /* the object */
	int status;		     /* 0, -ENOENT, -ECONNRESET, -ETIMEDOUT, -ENOSPC, ... */
	struct ferry_node_id source; /* where the bytes came from (ours: it was local) */
	unsigned transport;	     /* FERRY_GCS_TRANSPORT_* used; 0: it was local */
	uint64_t bytes;		     /* data + metadata bytes moved */
	uint64_t micros;	     /* from the request to the end */
	unsigned attempts;	     /* sources tried */
};

typedef void (*ferry__objmgr_pull_cb)(void *arg, const struct ferry__objmgr_result *res);

/* Counters (tests, diagnostics). */
struct ferry__objmgr_stats {
	uint64_t pulls_started;	     /* transfers begun (after dedup) */
	uint64_t pulls_joined;	     /* requests that joined a transfer already under way */
	uint64_t pulls_ok;	     /* transfers that ended sealed */
	uint64_t pulls_failed;	     /* transfers that ended in an error */
	uint64_t bytes_pulled;	     /* bytes of the sealed pulls */
	uint64_t bytes_in_flight;    /* admitted and not done */
	uint64_t pulls_in_flight;    /* transfers begun and not ended (the snapshot's) */
	uint64_t requests_served;    /* PullRequests answered */
	uint64_t requests_refused;   /* of those, answered with an error */
	uint64_t bytes_served;	     /* data bytes sent */
	uint64_t pulls_fast;	     /* of pulls_ok, those done on the loop's fast path */
	uint64_t fast_handovers;     /* fast-path pulls handed to a pull thread */
	uint64_t early_copies;	     /* RDMA copies created while their probe was out, kept */
	uint64_t early_discarded;    /* of those created, aborted: the reply said otherwise */
	uint64_t read_ahead_kept;    /* RDMA READs posted with the probe, from the directory's
				    * place, whose bytes the reply confirmed */
	uint64_t read_ahead_missed;  /* of those, READ again: the reply named another placement
				     * (or the READ failed) */
	uint64_t one_sided_kept;     /* small RDMA pulls done with one READ and no message: the
				     * bytes hashed to the directory's check */
	uint64_t one_sided_missed;   /* of those READs, bytes that did not (or a failed READ):
				     * the pull asked the source after all */
	uint64_t location_events;    /* location events the location cache took */
	uint64_t locations_followed; /* objects it follows now (keyed subscriptions) */
};

/* One pull that ended, for `ferry timeline` (the node's NodeInfo/Timeline, rt_admin.c). */
struct ferry__objmgr_event {
	struct ferry_object_id id;   /* the object */
	struct ferry_node_id source; /* where its bytes came from (nil: it was local) */
	unsigned transport;	     /* FERRY_GCS_TRANSPORT_* used; 0: it was local */
	int status;		     /* 0 or -errno */
	uint64_t bytes;		     /* moved, 0 when it failed */
	uint64_t start_us;	     /* wall clock (CLOCK_REALTIME) microseconds */
	uint64_t micros;	     /* from the request to the end */
};

/* Pulls kept for the timeline: a ring, the oldest overwritten (about 370 KiB once used). */
#define FERRY__OBJMGR_TIMELINE 4096u

/*
 * ferry__objmgr_timeline() - the last (at most @max) pulls that ended, oldest first, into
 * @out. Returns how many; *@dropped (if set): pulls that ended and are no longer kept.
 */
size_t ferry__objmgr_timeline(struct ferry__objmgr *om, struct ferry__objmgr_event *out, size_t max,
			      uint64_t *dropped);

/*
 * ferry__objmgr_create() - start the object manager: its loop thread (TCP server and pulls), or
 * on opts.loop, where its setup is posted and waited for (any thread but that loop's);
 * its pull threads start as pulls queue and leave when idle (thread_idle_ms); connects to the
 * own store; subscribes to the GCS node-deaths channel when @gcs is set (peers are looked up
 * when a pull first needs them). Returns 0 and *@out, -EINVAL (bad options, logged), -ENOMEM,
 * -EADDRINUSE, or the
 * store's / the GCS client's error.
 */
int ferry__objmgr_create(const struct ferry__objmgr_opts *opts, struct ferry__objmgr **out);

/*
 * ferry__objmgr_flush_notices() - the store has handled the seal of every copy this object
 * manager made so far (the loop's fast path holds those notices back up to 1 ms): after it,
 * the store lists them and its on_sealed hook has run for each, including a pull whose
 * waiters were just called back (its notice follows them on the loop). A loop pass and a round
 * trip to the store; any thread but the loop's. 0 or -errno.
 */
int ferry__objmgr_flush_notices(struct ferry__objmgr *om);

/*
 * ferry__objmgr_stop() - finish: pulls not done complete with -ECANCELED, threads joined,
 * connections closed (on opts.loop: shut down on it, waited for; any thread but its own).
 * The GCS subscription may still call in until the GCS client is
 * destroyed: destroy it after stop and before ferry__objmgr_destroy(). Idempotent.
 */
void ferry__objmgr_stop(struct ferry__objmgr *om);
/* ferry__objmgr_destroy() - stop if needed, then free. NULL is a no-op. With opts.loop: after
 * that loop is destroyed (what is left on it may call back into this object manager until
 * then). */
void ferry__objmgr_destroy(struct ferry__objmgr *om);

/* The TCP port it serves pulls on, and the own store's capacity in bytes. */
uint16_t ferry__objmgr_port(const struct ferry__objmgr *om);
/* FERRY_GCS_TRANSPORT_* it serves and uses (after optional ones were dropped). */
unsigned ferry__objmgr_transports(const struct ferry__objmgr *om);
/* The RDMA device in use ("rxe0"), or NULL without RDMA. */
const char *ferry__objmgr_rdma_device(const struct ferry__objmgr *om);
uint64_t ferry__objmgr_store_capacity(const struct ferry__objmgr *om);
/* ferry__objmgr_address() - this node's address text (see struct ferry__node_addr) into
 * @buf. Returns its length or -ENOSPC. */
int ferry__objmgr_address(const struct ferry__objmgr *om, char *buf, size_t size);

/*
 * ferry__objmgr_pull() - make object @id local: nothing to do if it is sealed here already;
 * else find its locations (the location cache fed by the GCS object-location channel, else a
 * directory lookup), pull it from one of them (shm on the same host first, then RDMA where both
 * nodes have it, then TCP; a large object over TCP in parts from up to 4 locations at once,
 * over RDMA in parts over several QPs), seal it as a secondary copy. The copy's directory
 * record: with opts.node_records_copies the node records it from its store's on_sealed hook,
 * after the callback and in store order with the copy's removal (so a delete right after the
 * pull never leaves a stale location); otherwise this object manager records it before the
 * callback. Concurrent pulls of one object share one transfer. @cb(@arg, result) runs once,
 * never from inside this call: on a pull thread, or on the loop thread for a small object
 * pulled on the loop's fast path (a cached TCP location), so it must not block. Returns 0, or -ENOMEM / -ECANCELED (stopping), with no callback then.
 * Result statuses: 0; -ENOENT not in the directory or at none of its locations; -ECONNRESET /
 * -ETIMEDOUT every location failed; -ENOSPC / -E2BIG the own store cannot hold it.
 */
int ferry__objmgr_pull(struct ferry__objmgr *om, const struct ferry_object_id *id,
		       ferry__objmgr_pull_cb cb, void *arg);

/*
 * ferry__objmgr_pull_until() - ferry__objmgr_pull() that waits for the object to appear, as a
 * get on one node waits for a put: while an attempt finds nothing to pull (-ENOENT: not
 * listed, or not at its locations; or every location failed: a dead or restarted source), the
 * pull looks the object up again at each location event for it and at least every 250 ms,
 * until @wait_ms from now (0: until ferry__objmgr_pull_unwant()). Joining a pull under way
 * extends its wait to this one's; a plain pull joining a waiting one waits with it. A waiting
 * pull that ends without its object logs a warning. Returns as ferry__objmgr_pull().
 */
int ferry__objmgr_pull_until(struct ferry__objmgr *om, const struct ferry_object_id *id,
			     uint32_t wait_ms, ferry__objmgr_pull_cb cb, void *arg);
/*
 * ferry__objmgr_pull_unwant() - nobody waits for @id any more (the node: its store's miss
 * episode ended): its waiting pull, if any, makes one last attempt at once (when between
 * attempts) and ends with that attempt's result. Any thread; never blocks.
 */
void ferry__objmgr_pull_unwant(struct ferry__objmgr *om, const struct ferry_object_id *id);

/* ferry__objmgr_pull_wait() - ferry__objmgr_pull() and wait; *@res (may be NULL) gets the
 * result. Returns its status. Not from a pull callback. */
/* ferry__objmgr_pull_all() - pull @ids[0..@count) concurrently and wait for all (not from a
 * pull callback); @results[i] gets each result (a pull that could not start gets its error).
 * Returns the first non-zero status in @ids order, 0 if all succeeded, or -ENOMEM. With a
 * busy-poll window (opts.spin_us) the waiting thread polls for the results before it sleeps. */
int ferry__objmgr_pull_all(struct ferry__objmgr *om, const struct ferry_object_id *ids,
			   size_t count, struct ferry__objmgr_result *results);
int ferry__objmgr_pull_wait(struct ferry__objmgr *om, const struct ferry_object_id *id,
			    struct ferry__objmgr_result *res);

/*
 * ferry__objmgr_publish() - record object @id, sealed in the own store as a primary copy, in
 * the GCS directory: owned by this node (owner worker id = the node id) unless an owner added it
 * already, with this node as a location. Blocking. Returns 0, -ENOENT (not sealed here), or
 * the GCS error.
 */
int ferry__objmgr_publish(struct ferry__objmgr *om, const struct ferry_object_id *id);

/* Test hook: ferry__rdma_inject_fault() (enum ferry__rdma_fault @fault on the READ completion
 * @nth from now) on this object manager's RDMA engine, run on its loop; waits for it. 0, or
 * -ENODEV (no RDMA here). */
int ferry__objmgr_rdma_inject_fault(struct ferry__objmgr *om, int fault, unsigned nth);

/* ferry__objmgr_get_stats() - a snapshot of the counters. */
void ferry__objmgr_get_stats(struct ferry__objmgr *om, struct ferry__objmgr_stats *out);

/*
 * ferry__objmgr_request_check() - the serving side's decoder alone (fuzz target): 0 if
 * @payload is a PullRequest or PullDone it would act on, else -EPROTO / -EINVAL.
 */
int ferry__objmgr_request_check(uint16_t type, const void *payload, size_t len);

#endif
