/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime side, shared by rt_srv.c (the runtime socket and its peers), rt_pool.c (the
 * worker processes) and rt_lease.c (leases and their queue). Internal to node/; everything here
 * belongs to the node's loop thread unless a field says otherwise. See rt_srv.c's DESIGN.
 */
#ifndef FERRY_NODE_RT_INT_H
#define FERRY_NODE_RT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <ferry/id.h>

#include "common/conn.h"
#include "common/fb.h"
#include "common/loop.h"
#include "node/resources.h"
#include "node/rt_wire.h"

struct ferry__node;
struct rt_worker;
struct rt_code;
struct rt_bundle;

/* Drivers and CLIs connected at once, RT_MAX_TCP_PEERS of them over TCP (remote owners): a
 * RuntimeConnect past either is refused -EUSERS. The node's own workers (two connections each)
 * count apart, so that no flood of drivers keeps the pool from starting workers, and the TCP
 * share leaves local drivers room whatever remote token holders do. */
#define RT_MAX_PEERS 1024u
#define RT_MAX_TCP_PEERS (RT_MAX_PEERS / 4u * 3u)
/* Connections at once that have not sent RuntimeConnect yet (the oldest makes room). */
#define RT_MAX_CONNECTING 64u
/* Unsent bytes to one peer before its requests wait (conn.h's backpressure). */
#define RT_MAX_QUEUED_BYTES (1u << 20)
/* A connection must send RuntimeConnect within this, a started worker connect within this. */
#define RT_CONNECT_TIMEOUT_MS 10000u
/* Lease requests waiting at one node; past it a request is answered -ENOSPC. One connection's
 * alive at once (queued, parked, held by the local scheduler, leased) are at most
 * RT_MAX_PEER_REQUESTS, so that one driver cannot fill the queue for every other. */
#define RT_MAX_QUEUED_REQUESTS 100000u
#define RT_MAX_PEER_REQUESTS (RT_MAX_QUEUED_REQUESTS / 2u)
/* Stop: SIGTERM, then SIGKILL after this. */
#define RT_KILL_GRACE_MS 2000u
/* A worker that died before it registered holds back the next start this long, doubled for each
 * such death in a row up to 32 s (no crash loop of a broken executable); after
 * RT_EARLY_DEATHS_FAIL in a row the waiting lease requests fail (-ENOEXEC) instead of waiting
 * for a worker that never comes. */
#define RT_RESPAWN_HOLD_MS 1000u
#define RT_RESPAWN_HOLD_MAX_SHIFT 5u
#define RT_EARLY_DEATHS_FAIL 3u
/* Placement groups' bundles at one node (rt_bundle.c); a prepared one not committed within
 * RT_BUNDLE_PREPARE_MS is released (its coordinator died or gave up). */
#define RT_MAX_BUNDLES 16384u
#define RT_BUNDLE_PREPARE_MS 5000u

/* A connection on the runtime socket: a driver, or a worker (the node's own). */
struct rt_peer {
	struct ferry__node_rt *rt;   /* owner */
	struct ferry__conn *conn;    /* NULL once closed */
	bool connected;		     /* its RuntimeConnect was accepted */
	uint8_t kind;		     /* FERRY__WIRE_PEER_KIND_DRIVER / _WORKER */
	struct ferry_worker_id id;   /* its ID */
	int pid;		     /* its process (SO_PEERCRED); 0 on TCP */
	bool tcp;		     /* came over TCP (rt_tcp.c): the token vouched for it */
	int pidfd;		     /* a pidfd for it (-1: none): did it die or close? */
	bool died;		     /* its socket closed with its process gone (rt_owner.c) */
	struct rt_worker *worker;    /* kind Worker: the pool's record of it */
	struct rt_worker *owner_of;  /* a worker's owner line (its tasks submit): that worker */
	uint64_t accepted_ms;	     /* when accepted (the connect deadline) */
	uint64_t refused_ms;	     /* its RuntimeConnect was refused then: closing; 0: not */
	bool counted;		     /* in rt->ndrivers (and rt->ntcp if tcp) */
	uint32_t reqs;		     /* its lease requests alive (rt_req.owner) */
	struct rt_peer *prev, *next; /* rt->peers */
	/* Closed holding leases: its pidfd is polled for a moment (rt_srv.c on_close). */
	struct ferry__loop_req dying_poll;    /* POLLIN on pidfd: it ended */
	struct ferry__loop_timer dying_timer; /* the moment ran out: cancels dying_poll */
	bool dying_timed_out;		      /* that happened */
};

/* A queued lease request (one allocation: the struct, resources, code path, hash). */
struct rt_req {
	struct rt_peer *owner;	 /* who asked; NULL once its connection closed */
	uint64_t request_id;	 /* echoed */
	struct ferry_job_id job; /* the job */
	char *code_path;	 /* or NULL */
	uint8_t *code_hash;	 /* or NULL */
	size_t code_hash_len;	 /* its bytes */
	uint32_t nres;		 /* entries in res */
	struct ferry__res *res;	 /* what it takes from the node's available set */
	struct rt_code *code;	 /* its code's entry (rt_code.c), or NULL */
	bool code_retried;	 /* its code was fetched again once already */
	/* A lease into a placement group's bundle (rt_bundle.c). */
	bool in_pg;			    /* granted from a bundle, never the free set */
	struct ferry_placement_group_id pg; /* in_pg: the group */
	int32_t bundle_index;		    /* in_pg: its bundle, or -1: any with room */
	struct rt_bundle *bundle;	    /* in_pg, once it fits: the bundle; NULL once gone */
	struct rt_req *next;		    /* queue, or rt_sched.c's lists */
	/* Placement (rt_sched.c), as the LeaseRequest said; and who counts it (reqs). */
	struct ferry__node_rt *rt;     /* counts it */
	bool placed;		       /* follows a placement: never forwarded */
	bool infeasible_reported;      /* warned and recorded as infeasible once */
	bool rechecked;		       /* placed here while busy and asked up again once */
	uint8_t strategy;	       /* enum ferry__rt_strategy */
	bool affinity_soft;	       /* NODE_AFFINITY: soft */
	struct ferry_node_id affinity; /* NODE_AFFINITY: the node */
	uint32_t ninputs;	       /* entries in inputs */
	struct ferry__rt_input inputs[FERRY__RT_REQ_INPUTS_MAX]; /* input bytes by node */
};

enum rt_wstate {
	W_STARTING = 1,	 /* spawned, not connected yet */
	W_IDLE = 2,	 /* connected, free */
	W_ASSIGNING = 3, /* WorkerAssign sent, its reply due (assign_req) */
	W_LEASED = 4,	 /* leased to lease_owner */
};

/* A worker process the node started. */
struct rt_worker {
	struct ferry__node_rt *rt;		/* owner */
	struct ferry_worker_id id;		/* FERRY_WORKER_ID */
	uint8_t secret[FERRY__RT_SECRET_BYTES]; /* FERRY_WORKER_SECRET */
	pid_t pid;				/* the process */
	int pidfd;				/* polled for its death; -1 once reaped */
	struct ferry__loop_req death;		/* POLLIN on pidfd */
	bool rewatch;				/* the poll failed: the tick submits it again */
	enum rt_wstate state;			/* see the enum */
	int signal_sent;			/* 0, SIGTERM or SIGKILL: the node ends it */
	int exit_if_killed;			/* enum ferry_gcs_exit when the node ended it */
	uint64_t signal_ms;			/* when the signal was sent */
	bool registered;			/* recorded in the GCS workers table */
	bool has_job;				/* assigned: serves job only */
	struct ferry_job_id job;		/* its job */
	struct rt_peer *peer;			/* its connection to the node, or NULL */
	struct rt_peer *owner_peer;		/* its owner line (rt_srv.c), or NULL */
	bool blocked;				/* LEASED: its task waits in a get */
	int64_t cpu_lent;			/* CPU of its lease given back meanwhile */
	char listen_path[FERRY__RT_PATH_MAX];	/* where owners push tasks */
	uint16_t listen_port;			/* and its TCP port on the node's ip, 0 none */
	uint64_t started_ms;			/* spawned */
	uint64_t idle_ms;			/* idle since */
	struct rt_req *req;			/* ASSIGNING / LEASED: the request served */
	struct rt_peer *lease_owner;		/* LEASED: the owner (NULL: gone, detached) */
	struct ferry_worker_id last_owner;	/* IDLE: who held its last lease (find_idle) */
	uint64_t lease_id;			/* LEASED: the lease */
	uint64_t leased_us;			/* LEASED: since (wall clock, the timeline) */
	bool detached;				/* LEASED: hosts detached_actor (LeaseDetach) */
	struct ferry_actor_id detached_actor;	/* ... which outlives the lease's owner */
	struct rt_worker *prev, *next;		/* rt->workers */
};

struct ferry__node_rt {
	struct ferry__node *node;	   /* owner */
	struct ferry__loop *loop;	   /* the node's */
	char path[FERRY__RT_PATH_MAX];	   /* the runtime socket */
	struct ferry__conn_server *server; /* listening; NULL once closed */
	char exe[PATH_MAX];		   /* ferry-worker to start; "" if none found */
	uint32_t num_workers;		   /* prestarted */
	uint32_t max_workers;		   /* at most */
	uint32_t idle_ms;		   /* reap idle workers above num_workers after */
	struct rt_worker *workers;	   /* every process not reaped yet */
	uint32_t nworkers;		   /* in the list */
	struct rt_peer *peers;		   /* every connection */
	uint32_t npeers;		   /* in the list */
	uint32_t ndrivers;		   /* of them connected, not the node's workers */
	uint32_t ntcp;			   /* of those, over TCP */
	uint64_t full_logged_ms;	   /* the last "too many drivers" line */
	uint64_t full_refused;		   /* refused since */
	struct rt_req *queue, *queue_tail; /* waiting lease requests, FIFO */
	uint32_t queued;		   /* in the queue */
	struct ferry__res_set avail;	   /* free now (taken by leases) */
	uint64_t next_lease_id;		   /* the last lease handed out */
	uint64_t respawn_after_ms;	   /* no start before (RT_RESPAWN_HOLD_MS) */
	uint32_t early_deaths;		   /* workers in a row that ended before connecting */
	struct ferry__loop_timer tick;	   /* deadlines, reaping, stop's escalation */
	struct ferry__fb_builder fb;	   /* replies */
	bool stopping;			   /* no new workers or leases */
	bool serving;			   /* in serve_queue (no re-entry) */
	bool listening;			   /* the socket file is ours to remove */
	struct rt_code *codes;		   /* the jobs' code by hash (rt_code.c) */
	struct rt_bundle *bundles;	   /* placement groups' bundles (rt_bundle.c) */
	uint32_t nbundles;		   /* in the list */
	struct ferry__offload *disk;	   /* rt_code.c's hashing and writes; started at need */
	uint32_t code_parked;		   /* requests waiting for a code fetch */
	struct rt_sched *sched;		   /* the local scheduler (rt_sched.c) */
	uint64_t mean_task_us;		   /* tasks' run time, moving mean (load report) */
	uint32_t reqs;			   /* alive: queued, parked, leased, held */
	uint32_t alive;			   /* workers not reaped; under node->lock (stop) */
	pthread_cond_t reaped;		   /* alive went down (with node->lock) */
	struct rt_event *events;	   /* the last leases that ended (rt_admin.c); NULL: none */
	uint64_t nevents;		   /* written to it since the start */
	uint64_t started_ms;		   /* the runtime's start (uptime) */
};

/* rt_srv.c */
void ferry__rt_peer_send_grant(struct rt_peer *p, uint64_t request_id, int status,
			       const char *message, const struct rt_worker *w);
/* A LeaseGrant of status -EXDEV: the owner sends the request to @node (@address) instead. */
void ferry__rt_peer_send_retry_at(struct rt_peer *p, uint64_t request_id,
				  const struct ferry_node_id *node, const char *address,
				  const char *message);
void ferry__rt_peer_send_revoked(struct rt_peer *p, const struct rt_worker *w, int status,
				 int term_signal, int exit_status, const char *message);
int ferry__rt_peer_send_assign(struct rt_peer *p, const struct rt_req *req);
void ferry__rt_peer_send_lease_blocked(struct rt_peer *p, uint64_t lease_id,
				       const struct ferry__rt_blocked *b);
void ferry__rt_peer_close(struct rt_peer *p, const char *why);
/* Send what a ferry__wire_*_build into p->rt->fb made (@built: its result). 0 or -errno. */
int ferry__rt_peer_send_built(struct rt_peer *p, uint16_t type, int built);
void ferry__rt_peer_send_bundle_reply(struct rt_peer *p, uint64_t request_id, int status,
				      const char *message);
/* A new connection to the runtime socket (Unix, or TCP past its handshake: rt_tcp.c). */
void ferry__rt_accept(struct ferry__node_rt *rt, struct ferry__conn *conn, bool tcp);

/* rt_free.c: delete from the store the objects an ObjectsFree of @p names that @p owns. */
void ferry__rt_objects_free(struct rt_peer *p, const struct ferry__rt_msg *m);
/* rt_owner.c: a peer whose process is gone (waiting up to @wait_ms for it to end); what a
 * dead owner leaves deleted (its objects in the store; a driver is also recorded dead in the
 * GCS). */
bool ferry__rt_peer_exited(const struct rt_peer *p, int wait_ms);
void ferry__rt_owner_gone(struct ferry__node_rt *rt, const struct ferry_worker_id *id, bool driver);

/* rt_admin.c: answer an operator's query (NodeInfo, Timeline, PlasmaStats, PlasmaList). */
void ferry__rt_admin_query(struct rt_peer *p, const struct ferry__rt_msg *m);
/* A lease of @w ended (returned, revoked, its owner gone) after running @tasks tasks (0:
 * unknown): one Lease event in the node's timeline. */
void ferry__rt_admin_lease_ended(struct ferry__node_rt *rt, const struct rt_worker *w,
				 uint32_t tasks, int status);
void ferry__rt_admin_free(struct ferry__node_rt *rt);
/* The wall clock in microseconds (CLOCK_REALTIME: nodes' timelines line up). */
uint64_t ferry__rt_admin_now_us(void);

/* rt_pool.c */
int ferry__rt_pool_start(struct ferry__node_rt *rt);
int ferry__rt_pool_spawn(struct ferry__node_rt *rt);
void ferry__rt_pool_top_up(struct ferry__node_rt *rt);
void ferry__rt_pool_signal(struct rt_worker *w, int sig, int exit_type, const char *why);
struct rt_worker *ferry__rt_pool_find(struct ferry__node_rt *rt, const struct ferry_worker_id *id);
void ferry__rt_pool_registered(struct rt_worker *w, struct rt_peer *p, const char *listen_path);
void ferry__rt_pool_tick(struct ferry__node_rt *rt, uint64_t now);
void ferry__rt_pool_kill_all(struct ferry__node_rt *rt, int sig);
uint32_t ferry__rt_pool_count(const struct ferry__node_rt *rt, enum rt_wstate state);

/* rt_lease.c */
void ferry__rt_lease_request(struct rt_peer *p, const struct ferry__rt_lease_request *q);
/* Whether @p holds a lease. */
bool ferry__rt_lease_held(const struct rt_peer *p);
/* @busy: its owner had tasks in flight on it (it shut down): the worker is ended. */
void ferry__rt_lease_return(struct rt_peer *p, uint64_t lease_id, bool busy, uint32_t tasks);
/* A returned lease ran @tasks tasks in @busy_us: into the node's mean task time. */
void ferry__rt_lease_task_times(struct ferry__node_rt *rt, uint32_t tasks, uint64_t busy_us);
/* LeaseDetach: @p's lease outlives @p (rt_lease.c). */
struct ferry__rt_detach;
void ferry__rt_lease_detach(struct rt_peer *p, const struct ferry__rt_detach *d);
void ferry__rt_lease_assign_reply(struct rt_peer *p, const struct ferry__rt_assign_reply *a);
/* WorkerBlocked on a worker's owner line: lend its lease's CPU out, or take it back. */
void ferry__rt_lease_blocked(struct rt_peer *p, const struct ferry__rt_blocked *b);
void ferry__rt_lease_peer_gone(struct rt_peer *p);
/* A worker is gone (reaped) or unusable: its lease revoked, its assignment re-queued. */
void ferry__rt_lease_worker_gone(struct rt_worker *w, int term_signal, int exit_status,
				 const char *message);
void ferry__rt_lease_serve(struct ferry__node_rt *rt);
/* Every waiting lease request is answered with @status and @why (workers cannot start). */
void ferry__rt_lease_fail_waiting(struct ferry__node_rt *rt, int status, const char *why);
void ferry__rt_lease_report(struct ferry__node_rt *rt);
void ferry__rt_req_free(struct rt_req *req);
struct rt_req *ferry__rt_req_new(struct rt_peer *p, const struct ferry__rt_lease_request *q);
/* Queue @req here (rt_sched.c decided so): answered at once if this node can never run it. */
void ferry__rt_lease_admit(struct ferry__node_rt *rt, struct rt_req *req);

/* rt_sched.c: the local scheduler. route: 0: queue @req here (the caller admits it); 1:
 * taken (answered with "retry at" or an error, or waiting for a decision: admitted or
 * answered later). */
int ferry__rt_sched_init(struct ferry__node_rt *rt);
void ferry__rt_sched_fini(struct ferry__node_rt *rt);
int ferry__rt_sched_route(struct ferry__node_rt *rt, struct rt_req *req);
void ferry__rt_sched_peer_gone(struct ferry__node_rt *rt, const struct rt_peer *p);
void ferry__rt_sched_stop(struct ferry__node_rt *rt);
/* A request parked for its code (rt_code.c): queued now, or answered with @status and @why. */
void ferry__rt_lease_code_done(struct ferry__node_rt *rt, struct rt_req *req, int status,
			       const char *why);

/* rt_bundle.c: BundlePrepare / Commit / Cancel / Return from @p (answered); whether a lease
 * request naming a group can ever be served here (0, or -ENOENT / -EINVAL with @why); whether
 * a queued one fits a bundle now (then req->bundle is the one); @sign -1 takes @req's
 * resources from its bundle, +1 gives them back; @p's bundles released; prepared bundles past
 * their deadline released; everything freed (the node's end). */
void ferry__rt_bundle_message(struct rt_peer *p, uint16_t type,
			      const struct ferry__rt_bundle_msg *m);
int ferry__rt_bundle_check(struct ferry__node_rt *rt, const struct ferry__rt_lease_request *q,
			   char *why, size_t size);
bool ferry__rt_bundle_fits(struct ferry__node_rt *rt, struct rt_req *req);
void ferry__rt_bundle_account(struct rt_req *req, int sign);
void ferry__rt_bundle_peer_gone(struct rt_peer *p);
void ferry__rt_bundle_tick(struct ferry__node_rt *rt, uint64_t now);
void ferry__rt_bundle_free_all(struct ferry__node_rt *rt);

#endif
