/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server's insides, shared by gcs/server.c (connections, requests, liveness) and
 * gcs/server_pubsub.c (subscriptions and delivery). Nothing else includes it.
 *
 * Thread model: the loop thread owns all of it.
 */
#ifndef FERRY_GCS_SERVER_INT_H
#define FERRY_GCS_SERVER_INT_H

#include <stdbool.h>

#include "common/conn.h"
#include "common/fb.h"
#include "common/hashmap.h"
#include "gcs/pubsub.h"
#include "gcs/server.h"
#include "gcs/state.h"

/* One accepted client connection. */
struct ferry__gcs_sconn {
	struct ferry__gcs_server *srv; /* owner */
	struct ferry__conn *conn;      /* the connection */
	struct ferry__ps_sub *sub;     /* its subscriber, created at the first subscribe */
	struct ferry__gcs_sconn *prev; /* server's list of connections */
	struct ferry__gcs_sconn *next; /* server's list of connections */
	struct ferry_node_id node;     /* the node whose beats it carries, if has_node */
	bool has_node;		       /* it registered or beat for a node */
	bool sub_limit_logged;	       /* its subscription limit was logged (once) */
	/* Drain lists: a subscriber with something to send is on srv->drain (or, held back by a
	 * full socket, on srv->drain_held), so a drain visits only those, never every connection. */
	struct ferry__gcs_sconn **dlist; /* the list it is on, NULL: none */
	struct ferry__gcs_sconn *dprev;	 /* same */
	struct ferry__gcs_sconn *dnext;	 /* same */
};

/* A reply held until its write is durable. */
struct held_reply {
	struct ferry__gcs_sconn *conn; /* NULL once the connection closed */
	uint64_t seq;		       /* the request's seq */
	uint64_t lsn;		       /* durable from this LSN */
	int status;		       /* the apply result */
};

struct ferry__gcs_server {
	struct ferry__loop *loop;	      /* the loop everything runs on */
	struct ferry__gcs_server_opts opts;   /* as given (token borrowed until listen) */
	struct ferry__gcs_state *state;	      /* tables, KV, object directory, WAL */
	struct ferry__ps *ps;		      /* pub/sub engine */
	struct ferry__conn_server *listener;  /* accepting socket */
	struct ferry__gcs_sconn *conns;	      /* every accepted connection */
	struct ferry__conn_client_cap cap;    /* ... how many, and the limit */
	struct ferry__gcs_sconn *drain;	      /* subscribers to drain in this pass */
	struct ferry__gcs_sconn *drain_held;  /* ... held back by a full socket: retried */
	struct ferry__loop_req wal_req;	      /* poll on the WAL's event fd */
	struct ferry__loop_timer liveness;    /* node deadlines, snapshots */
	struct ferry__loop_timer drain_retry; /* retries drains held back by full sockets */
	struct ferry__loop_timer drain_now;   /* the drain at the end of this loop pass */
	bool in_message;		      /* on_message is running */
	bool drain_wanted;		      /* a publish in on_message wants a drain */
	struct ferry__hashmap last_seen;      /* node ID -> monotonic ms of its last sign */
	struct ferry__hashmap loads;	      /* node ID -> its latest load (server_load.c) */
	uint64_t heartbeats;		      /* heartbeats taken (tests, stats) */
	uint64_t load_reports;		      /* load reports taken (tests, stats) */
	uint64_t membership_version;	      /* nodes-table changes this run (beat replies) */
	struct ferry__fb_builder beat_fb;     /* a beat reply's GcsBeatInfo */
	uint32_t deadline_ms;		      /* node deadline now, sized to the cluster
					       * (opts.node_deadline_ms: configured) */
	uint64_t deadline_held_ms;	      /* last time the sized deadline was still due */
	struct held_reply *held;	      /* replies waiting for durability (FIFO) */
	size_t held_head;		      /* first live entry */
	size_t held_count;		      /* entries used */
	size_t held_cap;		      /* entries allocated */
	struct ferry__loop_timer flush;	      /* the WAL flush at the end of this loop pass */
	struct ferry__fb_builder fb;	      /* reused for every outgoing message */
	struct ferry__gcs_buf scratch;	      /* record encoding work space */
	struct ferry__gcs_buf out;	      /* an encoded record */
	struct ferry__conn *peer;	      /* shards > 0: the connection to shard 0 */
	struct ferry__loop_timer peer_retry;  /* its reconnect */
	char peer_host[256];		      /* shard 0's host */
	uint16_t peer_port;		      /* and port */
};

int ferry__gcs_srv_reply(struct ferry__gcs_sconn *c, uint64_t seq, int status, const void *value,
			 size_t size, uint64_t epoch);

/* Flush the WAL at the end of this loop pass (no-op without one). */
void ferry__gcs_srv_want_flush(struct ferry__gcs_server *srv);

/* gcs/server_peer.c: follow node deaths on shard 0 (shards > 0 given its address): init checks
 * the address (0, -EINVAL), start connects (failures retry on a timer). */
int ferry__gcs_srv_peer_init(struct ferry__gcs_server *srv);
void ferry__gcs_srv_peer_start(struct ferry__gcs_server *srv);

/* gcs/server_read.c: multi-record reads (replies sent; multi_get: -EPROTO to close). */
void ferry__gcs_srv_kv_keys(struct ferry__gcs_sconn *c, uint64_t seq, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice prefix);
int ferry__gcs_srv_kv_multi_get(struct ferry__gcs_sconn *c, uint64_t seq,
				struct ferry__gcs_slice ns, struct ferry__gcs_slice list);
void ferry__gcs_srv_table_list(struct ferry__gcs_sconn *c, uint64_t seq, int table);
void ferry__gcs_srv_task_events(struct ferry__gcs_sconn *c, uint64_t seq, size_t max);
/* A multi-get's key list is well-formed: 0 or -EPROTO (for the fuzz target). */
int ferry__gcs_srv_key_list_check(struct ferry__gcs_slice list);
/* A GcsObjectLookupBatch (reply sent). */
void ferry__gcs_srv_lookup_batch(struct ferry__gcs_sconn *c, const void *payload);
/* One record of @table (a RESTORE_* record) appended to @out. 0, -ENOMEM. */
int ferry__gcs_srv_table_record(int table, const void *rec, struct ferry__gcs_buf *out);

/* The node showed a sign of life now (server.c). */
void ferry__gcs_srv_node_seen(struct ferry__gcs_server *srv, const struct ferry_node_id *id);

/* gcs/server_load.c: heartbeats and load reports (see its DESIGN). heartbeat: 1, 0 (no load
 * held: ask for one), -ENOENT. node_load: @rec/@size are @l's record bytes; 1 taken, 0 stale,
 * -ENOENT, -EINVAL, -ENOMEM. forget: a dead node's report goes (published as a removal).
 * snapshot: the engine's snapshot of the load channel (@key_size 0: all). list: every report as
 * u32-length-prefixed records appended to @out; the count or -ENOMEM. */
void ferry__gcs_srv_load_init(struct ferry__gcs_server *srv);
void ferry__gcs_srv_load_fini(struct ferry__gcs_server *srv);
int ferry__gcs_srv_heartbeat(struct ferry__gcs_server *srv, const struct ferry_node_id *id);
/* Answer a heartbeat (@status: ferry__gcs_srv_heartbeat's) with the cluster's size as a
 * GcsBeatInfo value when it succeeded. */
void ferry__gcs_srv_beat_reply(struct ferry__gcs_sconn *c, uint64_t seq, int status);
int ferry__gcs_srv_node_load(struct ferry__gcs_server *srv, const struct ferry_gcs_node_load *l,
			     const void *rec, size_t size);
void ferry__gcs_srv_load_forget(struct ferry__gcs_server *srv, const struct ferry_node_id *id);
int ferry__gcs_srv_load_snapshot(struct ferry__gcs_server *srv, struct ferry__ps_snap *snap,
				 const void *key, size_t key_size);
int ferry__gcs_srv_load_list(struct ferry__gcs_server *srv, struct ferry__gcs_buf *out);

/* gcs/server_pubsub.c */
int ferry__gcs_srv_pubsub_init(struct ferry__gcs_server *srv);
void ferry__gcs_srv_pubsub_fini(struct ferry__gcs_server *srv);
/* The state's change callback: publish the changed record. */
void ferry__gcs_srv_changed(void *arg, const struct ferry__gcs_change *c);
/* A LOG op from a client: published on the logs channel (keyed by its job), never stored.
 * 0, or the pub/sub engine's error (-E2BIG, -ENOMEM). */
int ferry__gcs_srv_publish_log(struct ferry__gcs_server *srv, const struct ferry__gcs_op *op);
/* Arm the drain that on_ready() deferred while a message was handled (see server_pubsub.c). */
void ferry__gcs_srv_drain_deferred(struct ferry__gcs_server *srv);
/* Take @c off the drain lists (it is closing). */
void ferry__gcs_srv_drain_forget(struct ferry__gcs_sconn *c);
/* A GcsSubscribe request; -EPROTO closes the connection. */
int ferry__gcs_srv_subscribe(struct ferry__gcs_sconn *c, const void *payload);
/* A GcsUnsubscribe request; -EPROTO closes the connection. */
int ferry__gcs_srv_unsubscribe(struct ferry__gcs_sconn *c, const void *payload);

#endif
