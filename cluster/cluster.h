/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local cluster inside one process: a GCS and one node as threads of this process, with
 * the same code and protocols as ferry-gcs and ferry-node (a store socket, TCP on loopback).
 * This is what ferry_init starts when it is given no cluster address; internal (ferry__),
 * in the static libraries, not exported from libferry.so.
 *
 * Thread model: start and stop from one controlling thread; the getters from any thread while
 * the cluster runs.
 */
#ifndef FERRY_CLUSTER_CLUSTER_H
#define FERRY_CLUSTER_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

struct ferry__cluster;
struct ferry__embed_node;

/* Options; all zeros is a working local cluster. */
struct ferry__cluster_opts {
	const char *run_dir;   /* an existing directory for the store socket; NULL: a
				 * fresh one under $TMPDIR, removed by ferry__cluster_stop() */
	const void *token;     /* cluster token (copied); NULL: 32 random bytes, hex */
	size_t token_len;      /* its bytes, 1..FERRY_TOKEN_MAX */
	uint64_t memory_bytes; /* the node's store; 0: 256 MiB */
	uint32_t num_workers;  /* the node's prestarted workers; 0: the node's default */
};

/*
 * ferry__cluster_start() - start a GCS on a free loopback port and one node registered with it,
 * and wait until the node is up. Returns 0 and *@out, -EINVAL (bad options), or the error of
 * the GCS, the node or the run directory (each logged).
 */
int ferry__cluster_start(const struct ferry__cluster_opts *opts, struct ferry__cluster **out);

/* ferry__cluster_stop() - stop the node, then the GCS, and remove the run directory if the
 * cluster made it. No thread, fd or file of the cluster is left after. NULL is a no-op. */
void ferry__cluster_stop(struct ferry__cluster *c);

/* The node's store socket (for ferry_plasma_client_connect). */
const char *ferry__cluster_store_socket(const struct ferry__cluster *c);
/* The GCS's "host:port" (for ferry_gcs_client_opts.addresses). */
const char *ferry__cluster_gcs_address(const struct ferry__cluster *c);
/* The cluster token; its length in *@len. */
const void *ferry__cluster_token(const struct ferry__cluster *c, size_t *len);
/* The node, for the helpers of cluster/embed.h. */
struct ferry__embed_node *ferry__cluster_node(struct ferry__cluster *c);

#endif
