/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node daemon's body, embeddable: a plasma store, the object manager, registration with
 * the GCS, heartbeats, and the object directory kept up to date for the objects the store
 * holds. ferry-node (node/main.c) runs one; tests, benchmarks and the demo may run several in
 * one process (each with its own store socket and port).
 *
 * Thread model: start/stop from one controlling thread; the getters from any thread.
 */
#ifndef FERRY_NODE_NODE_H
#define FERRY_NODE_NODE_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>

struct ferry__node;
struct ferry__objmgr;

/* Transport choice (--transport). */
enum ferry__node_transport {
	FERRY__NODE_TRANSPORT_AUTO = 0, /* RDMA if a device serves --ip, else without (logged) */
	FERRY__NODE_TRANSPORT_TCP = 1,	/* TCP (+ shm with nodes on this host) */
	FERRY__NODE_TRANSPORT_RDMA = 2, /* RDMA required (no device: the start fails); TCP and
					 * shm are served too, for peers without RDMA */
};

/* Options; zeros are defaults except gcs_address and the token. */
/* The longest pulled copies' directory records are gathered (1 s). */
#define FERRY__NODE_MAX_COPY_BATCH_US 1000000u

struct ferry__node_opts {
	const char *gcs_address;	      /* "host:port" of the GCS (required) */
	const void *token;		      /* cluster token (copied) */
	size_t token_len;		      /* its bytes, 1..256 */
	uint64_t memory_bytes;		      /* store arena; 0: the plasma default */
	enum ferry__node_transport transport; /* see the enum */
	unsigned no_shm;		      /* 1: never pull over shm (tests of TCP) */
	const char *ip;			      /* address to serve and advertise; NULL: 127.0.0.1 */
	uint16_t port;			      /* object manager port; 0: any free one */
	uint16_t rdma_port;		      /* RDMA listen port; 0: any free one */
	int rdma_busy_poll;		      /* 1: spin on the CQ while READs are in flight */
	uint32_t spin_us;	      /* object manager busy poll window (objmgr.h); 0: off */
	const char *socket_path;      /* store socket; NULL: a fresh one under $TMPDIR */
	const char *spill_dir;	      /* spill primaries there; NULL: never */
	const char *node_id_file;     /* keep the node id there across restarts; NULL: new */
	unsigned store_flags;	      /* FERRY__PLASMA_STORE_* (tests: NO_PREFAULT) */
	uint32_t heartbeat_ms;	      /* 0: 100 */
	uint32_t pull_timeout_ms;     /* one pull attempt's deadline; 0: 30000 */
	uint64_t max_bytes_in_flight; /* pull admission; 0: half the store */
	uint32_t copy_batch_us;	      /* pulled copies and removals are recorded in batches
				       * gathered for up to this long (primaries at once); 0:
				       * 1000, at most FERRY__NODE_MAX_COPY_BATCH_US */
	uint32_t notice_hold_ms;      /* the object manager's notice_hold_ms (objmgr.h); 0: 1,
				       * at most FERRY__OBJMGR_MAX_NOTICE_HOLD_MS */
};

/*
 * ferry__node_start() - start a node: store, object manager, GCS client; register the node
 * (address, store capacity) and start heartbeating. Returns 0 and *@out, -EINVAL (bad options,
 * logged), -ENODEV (transport rdma and no RDMA device serves the address), -EACCES /
 * -ETIMEDOUT (the GCS), or
 * the store's / object manager's error.
 */
int ferry__node_start(const struct ferry__node_opts *opts, struct ferry__node **out);

/* ferry__node_stop() - stop and free everything; the store socket and memory are gone after.
 * NULL is a no-op. */
void ferry__node_stop(struct ferry__node *node);

const struct ferry_node_id *ferry__node_id(const struct ferry__node *node);
/* The advertised address ("ip=...;tcp=...;shm=...;host=...") and the store socket path. */
const char *ferry__node_address(const struct ferry__node *node);
const char *ferry__node_socket(const struct ferry__node *node);
struct ferry__objmgr *ferry__node_objmgr(const struct ferry__node *node);

/* ferry__node_sync() - send every directory update queued so far (seals, removals) at once and
 * wait until they have reached the GCS. Returns 0 or the first error since the last sync. */
int ferry__node_sync(struct ferry__node *node);

/* ferry__node_read_token() - a token file's bytes (one trailing newline dropped) into @buf.
 * Returns the length, or -errno (logged). */
int ferry__node_read_token(const char *path, void *buf, size_t size);

#endif
