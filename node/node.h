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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>

#include "common/net.h"
#include "transport/objmgr.h"

struct ferry__node;

/* Transport choice (--transport). */
enum ferry__node_transport {
	FERRY__NODE_TRANSPORT_AUTO = 0, /* RDMA if a device serves --ip, else without (logged) */
	FERRY__NODE_TRANSPORT_TCP = 1,	/* TCP (+ shm with nodes on this host) */
	FERRY__NODE_TRANSPORT_RDMA = 2, /* RDMA required (no device: the start fails); TCP and
					 * shm are served too, for peers without RDMA */
};

/* Where the object manager serves pulls (--objmgr-loop; node.c's start_objmgr says why). */
enum ferry__node_objmgr_loop {
	FERRY__NODE_OBJMGR_LOOP_AUTO = 0, /* its own loop when the node serves RDMA, else NODE */
	FERRY__NODE_OBJMGR_LOOP_OWN = 1,  /* a loop thread of its own beside the node's */
	FERRY__NODE_OBJMGR_LOOP_NODE = 2, /* the node's one loop */
};

/* The most workers one node runs (--num-workers, --max-workers). */
#define FERRY__NODE_MAX_WORKERS 4096u

/* Options; zeros are defaults except gcs_address and the token. */
/* The longest pulled copies' directory records are gathered (1 s). */
#define FERRY__NODE_MAX_COPY_BATCH_US 1000000u

struct ferry__node_opts {
	const char *gcs_address;	      /* "host:port" of the GCS (required) */
	const void *token;		      /* cluster token (copied) */
	size_t token_len;		      /* its bytes, 1..256 */
	uint64_t memory_bytes;		      /* store arena; 0: the plasma default */
	enum ferry__node_transport transport; /* see the enum */
	unsigned no_shm;		      /* 1: never pull over shm (--shm off) */
	const char *ip;			      /* address or interface to serve on and advertise;
					       * NULL: see ferry__node_pick_ip() */
	uint16_t port;			      /* object manager port; 0: any free one */
	uint16_t rdma_port;		      /* RDMA listen port; 0: any free one */
	int rdma_busy_poll;		      /* 1: spin on the CQ while READs are in flight */
	uint32_t spin_us;      /* object manager busy poll window (objmgr.h); 0: off */
	uint16_t metrics_port; /* Prometheus GET /metrics on ip:port (node_metrics.c); 0: none */
	enum ferry__node_objmgr_loop objmgr_loop; /* where the object manager serves (below) */
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
	uint32_t max_queued_bytes;    /* pull listener: the object manager's (objmgr.h) */
	uint32_t stall_timeout_ms;    /* same */
	const char *num_cpus;	      /* --num-cpus ("2", "0.5"); NULL: detect (node/resources.h) */
	const char *num_gpus;	      /* --num-gpus; NULL: 0 (no detection) */
	const char *resources;	      /* --resources name=amount,...; NULL: none */
	/* The worker pool (node/rt_pool.c). */
	const char *worker_exe;	 /* ferry-worker to start; NULL: $FERRY_WORKER_EXE, else beside
				  * this program, else in PATH (none: no workers) */
	int32_t num_workers;	 /* prestarted; 0: the node's CPUs rounded up; < 0: none (workers
				  * start on demand only) */
	uint32_t max_workers;	 /* at most, less those that wait; 0: 4 x CPUs (>= num_workers) */
	uint32_t worker_idle_ms; /* workers above num_workers idle this long end; 0: 10000 */
	uint32_t spill_queue;	 /* lease requests queued before new ones go to the scheduler
				  * (node/rt_sched.c); 0: the node's CPUs rounded up */
	/* The GCS declared this node dead (its ID never comes back): called once on the node's
	 * loop thread after the log line; the daemon stops. NULL: the node only stops beating. */
	void (*on_declared_dead)(void *arg);
	void *dead_arg;		 /* for on_declared_dead */
	const char *sched_group; /* --group: the scheduler group this node belongs to (its tasks
				  * go to that group's ferry-sched); NULL: none */
};

/*
 * ferry__node_start() - start a node: store, GCS client, object manager (serving on the address
 * ferry__node_choose_ip() picks); register the node (address, store capacity), warn about
 * addresses in the cluster that cannot reach each other, and start heartbeating. Returns 0 and
 * *@out, -EINVAL (bad options, logged), -ENODEV (transport rdma and no RDMA device serves the
 * address, or --ip names no interface with an address), -EACCES / -ETIMEDOUT (the GCS), or the
 * store's / object manager's error.
 */
int ferry__node_start(const struct ferry__node_opts *opts, struct ferry__node **out);

/*
 * ferry__node_set_load() - what is free now (@avail: amounts by name, as node/resources.h counts
 * them; names the node does not have are ignored, absent ones stay as they were), the tasks
 * queued and the mean task time. The node's loop sends it with its next beat when it
 * changed (at most one report per heartbeat interval, none while nothing changes).
 */
struct ferry__res_set;
void ferry__node_set_load(struct ferry__node *node, const struct ferry__res_set *avail,
			  uint32_t queue_length, uint64_t mean_task_us);
/* The port of the --metrics-port endpoint (0: none), and the address it and the rest serve on. */
uint16_t ferry__node_metrics_port(const struct ferry__node *node);
const char *ferry__node_ip(const struct ferry__node *node);

/* ferry__node_set_workers() - the worker processes by state for the next load report. Any
 * thread. */
void ferry__node_set_workers(struct ferry__node *node, uint32_t idle, uint32_t leased,
			     uint32_t starting);

/* ferry__node_stop() - stop and free everything; the store socket and memory are gone after.
 * NULL is a no-op. */
void ferry__node_stop(struct ferry__node *node);

const struct ferry_node_id *ferry__node_id(const struct ferry__node *node);
/* The advertised address ("ip=...;tcp=...;shm=...;host=...") and the store socket path. */
const char *ferry__node_address(const struct ferry__node *node);
const char *ferry__node_socket(const struct ferry__node *node);
struct ferry__objmgr *ferry__node_objmgr(const struct ferry__node *node);
/* The runtime socket drivers and workers connect to (schema/runtime.fbs): the store socket's
 * path with ".rt" appended. */
const char *ferry__node_runtime_socket(const struct ferry__node *node);

/* ferry__node_sync() - send every directory update queued so far (seals, removals) at once and
 * wait until they have reached the GCS. Returns 0 or the first error since the last sync. Any
 * thread but the node's loop thread. */
int ferry__node_sync(struct ferry__node *node);

/* ---- the advertised address (node_addr.c) ---- */

/* The address a node advertises, and why (for the log). */
struct ferry__node_ip_pick {
	char ip[FERRY__NET_IP_MAX]; /* numeric */
	char why[160];		    /* where it came from */
};

/*
 * ferry__node_pick_ip() - the address a node serves on and advertises, from the inputs that
 * ferry__node_choose_ip() gathers: @opt_ip (--ip) when it is an address, or an interface's
 * first address when it names one (NULL, empty or a wildcard: not given); else @route_ip, the
 * local address of the node's connection to the GCS (NULL: 127.0.0.1); but with @want_rdma,
 * when @route_ip is not loopback and its interface has no RDMA device, the first address of an
 * up interface that has one. @ifs[0..@n): this host's addresses (ferry__net_ifaces()).
 * 0, or -ENODEV (@opt_ip is neither an address nor an interface with one; logged).
 */
int ferry__node_pick_ip(const char *opt_ip, const char *route_ip, bool want_rdma,
			const struct ferry__net_iface *ifs, size_t n,
			struct ferry__node_ip_pick *out);

/* ferry__node_check_ip() - whether --ip @opt_ip (NULL, "" or a wildcard: not given) can be
 * served here: an IP address, or the name of an interface of this host that has one. 0 or
 * -ENODEV (logged). Checked before the store is set up, which can take seconds. */
int ferry__node_check_ip(const char *opt_ip);
/* ferry__node_choose_ip() - ferry__node_pick_ip() on this host for a node whose GCS client
 * @gcs is connected: the address into @ip (logged at info). 0 or -errno. */
int ferry__node_choose_ip(struct ferry_gcs_client *gcs, const struct ferry__node_opts *o, char *ip,
			  size_t size);

/*
 * ferry__node_addr_clash() - whether two nodes' advertised addresses cannot reach each other:
 * on different hosts (boot ids), one loopback and the other not. 0: fine; 1: @self is the
 * loopback one; 2: @other is.
 */
int ferry__node_addr_clash(const struct ferry__node_addr *self,
			   const struct ferry__node_addr *other);

/*
 * ferry__node_check_addresses() - for a node whose @address is loopback while it reaches the
 * GCS over a network: WARN if a live node on another host advertises a network address
 * (ferry__node_addr_clash()), else say at info that later ones will not reach it. Nothing
 * for other nodes (the check lists every node; `ferry status` shows every clash).
 */
void ferry__node_check_addresses(struct ferry_gcs_client *gcs, const struct ferry_node_id *self_id,
				 const char *address);

#endif
