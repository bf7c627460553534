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
	struct ferry__loop_req wal_req;	      /* poll on the WAL's event fd */
	struct ferry__loop_timer liveness;    /* node deadlines, snapshots */
	struct ferry__loop_timer drain_retry; /* retries drains held back by full sockets */
	struct ferry__hashmap last_seen;      /* node ID -> monotonic ms of its last sign */
	uint32_t deadline_ms;		      /* node heartbeat deadline */
	struct held_reply *held;	      /* replies waiting for durability (FIFO) */
	size_t held_head;		      /* first live entry */
	size_t held_count;		      /* entries used */
	size_t held_cap;		      /* entries allocated */
	bool flush_posted;		      /* a WAL flush is posted for this turn */
	bool drain_posted;		      /* a pub/sub drain is posted for this turn */
	struct ferry__fb_builder fb;	      /* reused for every outgoing message */
	struct ferry__gcs_buf scratch;	      /* record encoding work space */
	struct ferry__gcs_buf out;	      /* an encoded record */
};

int ferry__gcs_srv_reply(struct ferry__gcs_sconn *c, uint64_t seq, int status, const void *value,
			 size_t size, uint64_t epoch);

/* gcs/server_pubsub.c */
int ferry__gcs_srv_pubsub_init(struct ferry__gcs_server *srv);
void ferry__gcs_srv_pubsub_fini(struct ferry__gcs_server *srv);
/* The state's change callback: publish the changed record. */
void ferry__gcs_srv_changed(void *arg, const struct ferry__gcs_change *c);
/* A GcsSubscribe request; -EPROTO closes the connection. */
int ferry__gcs_srv_subscribe(struct ferry__gcs_sconn *c, const void *payload);

#endif
