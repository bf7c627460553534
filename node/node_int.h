/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's state, shared by node.c (start, stop), node_dir.c (store hooks, directory) and
 * node_gcs.c (registration, heartbeats). Internal to node/.
 */
#ifndef FERRY_NODE_NODE_INT_H
#define FERRY_NODE_NODE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ferry/gcs.h>

#include "common/conn.h"
#include "common/loop.h"
#include "gcs/client.h"
#include "node/node.h"
#include "node/resources.h"
#include "plasma/server.h"

/* Directory items the loop sends at once, pipelined (node_dir.c). */
#define DIR_BATCH 64

enum dir_kind {
	DIR_SEALED = 1,	 /* a primary copy sealed: object_add + add_location */
	DIR_REMOVED = 2, /* a copy left: remove_location */
	DIR_COPY = 3,	 /* a secondary (pulled) copy sealed: add_location */
	DIR_MOVED = 4,	 /* a listed copy read back from spill: add_location (its new place) */
};

struct dir_item {
	enum dir_kind kind;		     /* what to tell the GCS */
	uint64_t queued_ns;		     /* when (CLOCK_MONOTONIC) */
	struct ferry_object_id id;	     /* the object */
	uint64_t size;			     /* its data bytes */
	uint32_t metadata_size;		     /* its metadata bytes */
	struct ferry_gcs_object_place place; /* where the store put it (sealed kinds) */
	struct ferry_worker_id owner;	     /* its owner (DIR_SEALED); nil: this node */
	struct dir_item *next;		     /* queue */
};

struct dir_batch;
struct ferry__node_rt;

struct ferry__node {
	struct ferry__node_opts opts;	       /* copied; strings point into this struct */
	uint8_t token[256];		       /* cluster token */
	char socket_path[108];		       /* the store's socket */
	char address[FERRY__NODE_ADDR_MAX];    /* advertised */
	char ip[FERRY__NET_IP_MAX];	       /* served on and advertised (node_addr.c) */
	struct ferry__metrics_server *metrics; /* --metrics-port's endpoint, or NULL */
	struct ferry_node_id id;	       /* this node */
	struct ferry__plasma_server *store;    /* the embedded store */
	struct ferry_gcs_client *gcs;	       /* GCS client, on loop */
	struct ferry__objmgr *om;	       /* object manager; NULL before start / after stop */
	struct ferry__loop *loop;	       /* the node's loop: GCS client, beats, directory */
	pthread_t loop_thread;		       /* runs loop */
	bool loop_started;		       /* loop_thread was created */
	bool loop_live;			       /* posts allowed; under lock */
	bool kick_posted;		       /* a dir_kick is posted; under lock */
	bool gcs_gone;			       /* the client is destroyed (loop thread) */
	bool beat_busy;			       /* a beat awaits its reply (loop thread) */
	uint64_t next_beat_ms;		       /* monotonic: no beat before (loop thread) */
	struct ferry__loop_timer beat_timer;   /* every heartbeat_ms */
	struct ferry__loop_timer gather_timer; /* the gathered copies are due */
	pthread_mutex_t lock;		       /* below, and om for the hooks */
	pthread_cond_t idle_cond;	       /* sync's and stop's: queue drained */
	struct dir_item *queue;		       /* directory updates to make */
	struct dir_item *queue_tail;	       /* last */
	unsigned queued;		       /* items in the queue */
	unsigned queued_primaries;	       /* of those, DIR_SEALED */
	bool flush;			       /* ferry__node_sync: send what is queued now */
	unsigned dir_busy;		       /* a batch is out (0 or 1) */
	int dir_error;			       /* first error since the last sync */
	bool stopping;			       /* no new beats; the queue drains at once */
	struct dir_batch *batch;	       /* the batch out (loop thread) */
	struct ferry__res_set total;	       /* what the node has (node/resources.h) */
	struct ferry__res_set avail;	       /* what is free; under lock */
	uint32_t queue_length;		       /* tasks queued; under lock */
	uint64_t mean_task_us;		       /* mean task time; under lock */
	uint32_t workers[3];		       /* idle, leased, starting workers; under lock */
	bool load_changed;		       /* a report is due; under lock */
	uint64_t load_version;		       /* of the last report; under lock */
	uint32_t cluster_nodes;		       /* alive, as the last beat reply said (loop) */
	bool reregistering;		       /* a register after -ENOENT is out (loop) */
	bool declared_dead;		       /* the GCS declared us dead: no more beats (loop) */
	struct ferry__node_rt *rt;	       /* runtime socket, workers, leases (rt_*.c) */
	struct ferry__conn_server *rt_tcp;     /* the runtime endpoint on TCP (rt_tcp.c) */
	bool rt_ready;			       /* rt serves: set and read on the loop */
};

/* The GCS requests of the batch out (one at a time, allocated once at start). */
struct dir_slot {
	struct dir_batch *b; /* owner */
	unsigned i;	     /* the op's index */
};
struct dir_batch {
	struct ferry__node *node;		 /* owner */
	struct dir_item *items;			 /* the batch's items, detached */
	size_t left;				 /* replies still due, +1 while sending */
	struct ferry__gcs_op ops[2 * DIR_BATCH]; /* two for a primary, else one */
	unsigned shards[2 * DIR_BATCH];		 /* each op's shard */
	int st[2 * DIR_BATCH];			 /* each op's result */
	struct dir_slot slots[2 * DIR_BATCH];	 /* each op's callback argument */
};

/* node_dir.c: the store's hooks into @so (hook_arg: @node). */
void ferry__node_dir_hooks(struct ferry__node *node, struct ferry__plasma_server_opts *so);

/* node_dir.c: stop's drain of the directory queue (its replies awaited while the loop runs). */
void ferry__node_dir_drain(struct ferry__node *node);

/* node_gcs.c: find the node's resources, register it, start its beats on the loop. */
int ferry__node_register(struct ferry__node *node);

/* rt_srv.c: the runtime socket and the worker pool: start (after registration, the loop
 * running), shutdown (stop: connections closed, workers ended and reaped; the loop still
 * runs), loop_gone (its thread joined, before it is destroyed: helper threads end), free
 * (after the loop is destroyed). */
int ferry__node_rt_start(struct ferry__node *node);
/* node_metrics.c: the --metrics-port endpoint on the node's loop. */
int ferry__node_metrics_start(struct ferry__node *node);
void ferry__node_metrics_stop(struct ferry__node *node);
void ferry__node_rt_shutdown(struct ferry__node *node);
void ferry__node_rt_loop_gone(struct ferry__node *node);
void ferry__node_rt_free(struct ferry__node *node);

/* rt_tcp.c: the runtime endpoint on TCP (token handshake): listen on the node's ip before the
 * node registers, its port added to node->address as rt=P; close (on the loop). */
int ferry__node_rt_listen_tcp(struct ferry__node *node);
void ferry__node_rt_close_tcp(struct ferry__node *node);
/* A worker's address for the GCS workers table: "ip=;rt=@port;shm=@path;host=" (the node's ip
 * and boot id) when it serves TCP, else @path; into @buf, which is returned. */
const char *ferry__node_rt_worker_address(const struct ferry__node *node, const char *path,
					  uint16_t port, char *buf, size_t size);

#endif
