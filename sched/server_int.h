/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched's insides, shared by its two files: sched/server.c (the view of the nodes, the
 * requests, the instance's life) and sched/server_tree.c (the tree: a group's members and
 * reports, groups seen from the global level, requests forwarded between levels).
 *
 * Thread model: everything on the server's loop.
 */
#ifndef FERRY_SCHED_SERVER_INT_H
#define FERRY_SCHED_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/gcs.h>

#include "common/conn.h"
#include "common/fb.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "sched/client.h"
#include "sched/policy.h"
#include "sched/proto.h"
#include "sched/server.h"
#include "sched/uplink.h"

#define CUSTOM_KINDS (FERRY__SCHED_KINDS - 4)
#define MEMBERS_POLL_MS 500u /* a group reads its members from the KV */
#define REPORT_MS 200u	     /* a group's summary to the global instances */
#define FORWARDED 1	     /* place_one: the answer comes later */
/* Requests in flight to another level: a flood of asks beyond it is decided here (a group's
 * own choice) or refused -EAGAIN, so that it cannot grow the daemon's memory without bound. */
#define FORWARDS_MAX 65536u
/* A group whose summaries stop this long takes nothing until it reports again (it reports
 * every REPORT_MS): its scheduler is gone, and tasks sent down would only fail over retries. */
#define GROUP_SILENT_MS 3000u
/* Groups the global level keeps apart: a summary naming one more is ignored, so that a peer
 * inventing names cannot grow the daemon without bound (each is a child of the level). */
#define GROUPS_MAX 1024u

struct snode {
	struct ferry_node_id id; /* the node */
	char *address;		 /* as registered (ferry__malloc'd), or NULL until known */
	bool dead;		 /* its child takes nothing more */
	bool reported;		 /* its load reached us (until then its child is not alive) */
	uint64_t seen_gen;	 /* the nodes-channel snapshot that last showed it */
	bool member;		 /* a group's scheduler: one of its nodes */
	bool grouped;		 /* global: under a group (its own child takes nothing) */
	char *group;		 /* global: this entry is a group (its name), not a node */
	struct ferry__sched_client *down; /* global: to that group's scheduler, or NULL */
	uint64_t report_ms;		  /* global, a group: when its last summary came */
};

/* An accepted connection; it outlives its close while forwarded requests still answer to it. */
struct sconn {
	struct ferry__sched_server *srv; /* owner */
	struct ferry__conn *conn;	 /* NULL once closed */
	unsigned refs;			 /* the connection + forwards in flight */
	struct sconn *prev, *next;	 /* srv->clients, while its connection is open */
};

/* A request sent to another level; its answer goes back to the asker as it comes. */
struct fwd {
	struct sconn *sc;		 /* the asker */
	uint64_t request_id;		 /* the asker's */
	struct ferry__sched_client *via; /* the client it went through */
	bool has_fallback;		 /* a group's own choice when the global does not answer: */
	struct ferry__sched_decision fallback; /* ... where it queues */
	uint32_t ndemand;		       /* ... and what it takes there (commit) */
	struct ferry__sched_amount demand[FERRY__SCHED_DEMAND_MAX]; /* ... */
};

struct sub {
	struct ferry__sched_server *srv; /* owner */
	enum ferry_gcs_channel channel;	 /* NODES or NODE_LOAD */
	bool ready;			 /* its first snapshot ended */
	struct ferry__loop_timer retry;	 /* resubscribe after a failure */
};

struct ferry__sched_server {
	struct ferry__loop *loop;			    /* ours */
	struct ferry_gcs_client *gcs;			    /* on loop */
	struct ferry__conn_server *listener;		    /* the TCP port */
	struct ferry__sched_level *level;		    /* one child per node */
	struct ferry__hashmap by_node;			    /* node ID -> uint32_t index in nodes */
	struct snode *nodes;				    /* index = child number */
	uint32_t nnodes, cap_nodes;			    /* used, allocated */
	char custom[CUSTOM_KINDS][FERRY__RES_NAME_MAX + 1]; /* custom kind 4 + i */
	unsigned ncustom;				    /* used */
	struct sub subs[2];				    /* NODES, NODE_LOAD */
	struct ferry__fb_builder fb;			    /* replies */
	struct ferry__sched_item item;			    /* decode space */
	struct ferry__sched_result *results;		    /* BATCH_MAX of them */
	char id_hex[2 * sizeof(struct ferry_node_id) + 1];  /* KV key */
	char advertise[300];				    /* KV value: host:port */
	const char *advertise_host;			    /* from the options, or NULL */
	bool registered;				    /* the KV put went out */
	void (*stop_done)(void *arg);			    /* ferry__sched_server_stop */
	void *stop_arg;					    /* its argument */
	uint64_t placed, refused;			    /* counters for the log */
	uint64_t nodes_gen; /* whole-channel RESYNCs of the nodes channel so far */
	char group[FERRY__SCHED_GROUP_NAME_MAX + 1];   /* a group's scheduler: the name; else "" */
	char kv_ns[128];			       /* where instances of this level register */
	struct ferry__sched_client *up;		       /* a group: to the global level */
	struct ferry__sched_uplink *uplink;	       /* a group: reports to the global level */
	struct ferry__loop_timer members_timer;	       /* a group: the KV read of its members */
	struct ferry__loop_timer report_timer;	       /* a group: its summary, every REPORT_MS */
	struct ferry__loop_timer silent_timer;	       /* global: groups that stopped reporting */
	bool members_reading;			       /* a members read in flight */
	uint64_t report_version;		       /* of the group's summaries */
	uint64_t next_fwd_id;			       /* request IDs of forwards */
	uint64_t forwarded;			       /* counters for the log */
	uint32_t ngroups;			       /* global: group entries (<= GROUPS_MAX) */
	struct sconn *clients;			       /* open connections past their handshake */
	struct ferry__conn_client_cap cap;	       /* how many in that list, and the limit */
	struct ferry_node_id self;		       /* this instance (its ID) */
	uint8_t listener_token[256];		       /* the cluster token (for the clients) */
	size_t listener_token_len;		       /* its bytes */
	struct ferry__sched_group_report group_report; /* decode space */
};

/* server.c: a resource name's kind (@add: a new custom one); a node's (or group's) entry. */
int ferry__sched_srv_kind_of(struct ferry__sched_server *s, const char *name, bool add);
int ferry__sched_srv_node_index(struct ferry__sched_server *s, const struct ferry_node_id *id,
				bool add, uint32_t *out);
/* server.c: a NODE_LOAD event (@arg: the load subscription, &s->subs[1]). */
void ferry__sched_srv_on_load_event(void *arg, const struct ferry_gcs_event *ev);

/* server_tree.c, global level: a group's entry ID; its summary from @peer (0, -EPROTO); whether entry
 * @i is the current one of its ID; the timer that finds silent groups (data: the server). */
void ferry__sched_srv_group_id(const char *name, struct ferry_node_id *out);
int ferry__sched_srv_group_load(struct ferry__sched_server *s, const char *peer,
				const void *payload, size_t len);
bool ferry__sched_srv_current(const struct ferry__sched_server *s, uint32_t i);
void ferry__sched_srv_on_silent_timer(struct ferry__loop_timer *t, int status);
/* server_tree.c, a group: its client up, report links and timers. 0 or -errno. */
int ferry__sched_srv_group_start(struct ferry__sched_server *s, const void *token,
				 size_t token_len);
/* server_tree.c: @it (@task as decided here) sent to @via (answered to @sc later: 0), or
 * -errno; @fallback: this level's own decision, used when @via fails (NULL: its error is the
 * answer). A group's client to group entry @g (made on first use, NULL on failure); an
 * accepted connection let go. */
int ferry__sched_srv_forward(struct ferry__sched_server *s, struct sconn *sc,
			     const struct ferry__sched_item *it, struct ferry__sched_client *via,
			     const struct ferry__sched_task *task,
			     const struct ferry__sched_decision *fallback);
struct ferry__sched_client *ferry__sched_srv_group_client(struct ferry__sched_server *s,
							  struct snode *g);
void ferry__sched_srv_sconn_unref(struct sconn *sc);

#endif
