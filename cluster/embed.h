/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pieces of a cluster inside one process: a GCS server on its own loop thread, and nodes
 * started with ferry__node_start() (the body of ferry-node), with the same code and the same
 * protocols (TCP and Unix sockets on this host) as separate processes. cluster/cluster.h puts
 * one GCS and one node together (ferry_init's local cluster); the transport benchmark and the
 * cluster demo start several nodes with these and use the put / check / drop / pull helpers.
 *
 * Thread model: start/stop from one controlling thread. The pull helpers may be called from
 * any thread but the object manager's own.
 */
#ifndef FERRY_CLUSTER_EMBED_H
#define FERRY_CLUSTER_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "transport/objmgr.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry__embed_gcs;
struct ferry__embed_node;

/* ferry__embed_gcs_start() - a GCS listening on @host:@port (0: a free port) with @token.
 * Nodes never expire (the embedding process heartbeats for none). 0 or -errno. */
int ferry__embed_gcs_start(const char *host, uint16_t port, const void *token, size_t token_len,
			   struct ferry__embed_gcs **out);
uint16_t ferry__embed_gcs_port(const struct ferry__embed_gcs *g);
/* Stop the loop thread and free. NULL is a no-op. */
void ferry__embed_gcs_stop(struct ferry__embed_gcs *g);

/* Options of one node; zeros are defaults except gcs and token. */
struct ferry__embed_node_opts {
	const char *gcs;	 /* "host:port" of the GCS */
	const void *token;	 /* cluster token */
	size_t token_len;	 /* its bytes */
	const char *ip;		 /* --ip of the node (node.h); NULL: its default */
	uint64_t memory_bytes;	 /* store arena; 0: 256 MiB */
	unsigned transports;	 /* FERRY_GCS_TRANSPORT_*; 0: the object manager's default */
	const char *name;	 /* for socket names and logs; NULL: "node" */
	uint32_t spin_us;	 /* the object manager's busy poll window (objmgr.h); 0: off */
	const char *socket_path; /* the store socket; NULL: a fresh one under $TMPDIR */
	int32_t num_workers;	 /* prestarted ferry-workers (node.h); 0: its CPUs, < 0: none */
	int objmgr_loop;	 /* enum ferry__node_objmgr_loop (node.h); 0: auto */
};

/* ferry__embed_node_start() - a node (ferry__node_start) and a store client. 0 or -errno
 * (logged); -EOPNOTSUPP for RDMA while the node serves none. */
int ferry__embed_node_start(const struct ferry__embed_node_opts *opts,
			    struct ferry__embed_node **out);
/* Stop the node; its store is gone after. NULL is a no-op. */
void ferry__embed_node_stop(struct ferry__embed_node *n);

struct ferry__objmgr *ferry__embed_node_objmgr(struct ferry__embed_node *n);
struct ferry_plasma_client *ferry__embed_node_client(struct ferry__embed_node *n);
const struct ferry_node_id *ferry__embed_node_id(const struct ferry__embed_node *n);
/* The address the node advertises ("ip=...;tcp=...;shm=...;host=..."). */
const char *ferry__embed_node_address(const struct ferry__embed_node *n);

/* The byte at @offset of the pattern object @id holds (tells a misplaced chunk apart). */
static inline uint8_t ferry__embed_pattern(const struct ferry_object_id *id, uint64_t offset)
{
	return (uint8_t)(id->bytes[0] * 31u + (offset >> 12) * 7u + offset);
}

/* ferry__embed_put() - create @id of @size bytes filled with the pattern, seal, and wait until
 * the node recorded it in the directory. 0 (also when it exists already) or -errno. */
int ferry__embed_put(struct ferry__embed_node *n, const struct ferry_object_id *id, uint64_t size);
/* ferry__embed_check() - 0 if the local copy of @id has @size bytes of the pattern, -EIO if a
 * byte differs, or the get's error. Samples every 4 KiB and both ends. */
int ferry__embed_check(struct ferry__embed_node *n, const struct ferry_object_id *id,
		       uint64_t size);
/* ferry__embed_drop() - delete the local copy of @ids[0..@n) and wait until the node removed
 * itself from their locations, so that they can be pulled again. 0 or the first error. */
int ferry__embed_drop(struct ferry__embed_node *n, const struct ferry_object_id *ids, size_t count);
/* ferry__embed_pull_all() - pull @ids[0..@count) concurrently and wait for all; @results[i]
 * gets each outcome. Returns 0 or the first failing status. */
int ferry__embed_pull_all(struct ferry__embed_node *n, const struct ferry_object_id *ids,
			  size_t count, struct ferry__objmgr_result *results);

#ifdef __cplusplus
}
#endif
#endif
