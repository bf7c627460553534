/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's insides, shared by gcs/client.c (loop thread, connections, requests) and
 * gcs/client_api.c (public calls, subscriptions, event delivery). Nothing else includes it.
 *
 * Thread model: fields marked "loop" belong to the loop thread; "lock" ones to c->lock.
 */
#ifndef FERRY_GCS_CLIENT_INT_H
#define FERRY_GCS_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "common/fb.h"
#include "common/loop.h"
#include "common/wire.h"
#include "gcs/client.h"

#define FERRY__GCS_TOKEN_MAX 4096
#define FERRY__GCS_HOST_MAX 256

/* A caller blocked on a request. */
struct waiter {
	atomic_int refs;	      /* the caller and the request */
	pthread_mutex_t lock;	      /* guards done and res */
	pthread_cond_t cond;	      /* signalled when done */
	bool done;		      /* answered */
	struct ferry__gcs_result res; /* the answer */
};

/* A subscription (loop). */
struct ferry__gcs_csub {
	struct ferry__gcs_csub *next; /* client's list */
	uint8_t channel;	      /* enum ferry_gcs_channel */
	uint8_t key_size;	      /* 0: whole channel */
	uint8_t key[20];	      /* the key */
	uint64_t shard_mask;	      /* shards it is subscribed on */
	ferry_gcs_event_fn fn;	      /* the user's callback */
	void *arg;		      /* for fn */
};

/* A request waiting for its reply (loop once posted). */
struct creq {
	struct creq *next;	     /* shard's pending list */
	struct shard *shard;	     /* where it goes */
	struct waiter *waiter;	     /* who waits */
	struct ferry__gcs_csub *sub; /* GcsSubscribe: the subscription, else NULL */
	uint64_t seq;		     /* matches the reply */
	uint16_t type;		     /* MessageType */
	void *payload;		     /* the built message (owned) */
	size_t len;		     /* its bytes */
};

struct shard {
	struct ferry_gcs_client *client;	 /* owner */
	unsigned index;				 /* shard number */
	char host[FERRY__GCS_HOST_MAX];		 /* address */
	uint16_t port;				 /* port */
	struct ferry__conn *conn;		 /* loop: current connection, or NULL */
	bool connected;				 /* loop: handshake done */
	bool ever_connected;			 /* lock: connected at least once */
	struct sockaddr_storage local;		 /* lock: our end of the last connection */
	socklen_t local_len;			 /* lock: its length; 0 before the first */
	struct ferry__loop_timer reconnect;	 /* loop: next attempt */
	struct creq *pending;			 /* loop: requests without a reply */
	uint64_t epoch;				 /* loop: pub/sub epoch of the last batch, 0 none */
	uint64_t watermarks[FERRY_GCS_CH_COUNT]; /* loop: per channel, delivered up to */
};

struct ferry_gcs_client {
	struct ferry__loop *loop;	     /* the client's loop */
	pthread_t thread;		     /* runs the loop */
	bool thread_started;		     /* thread is joinable */
	bool closing;			     /* destroy began: no reconnects */
	pthread_mutex_t lock;		     /* connect state */
	pthread_cond_t cond;		     /* connect progress */
	int connect_error;		     /* lock: a shard refused us (-EACCES) */
	unsigned timeout_ms;		     /* connect and blocking calls */
	unsigned reconnect_ms;		     /* between attempts */
	atomic_uint_fast64_t next_seq;	     /* request seqs */
	struct ferry__wire_unique_id id;     /* random: the server deduplicates (id, seq) */
	struct ferry__gcs_csub *subs;	     /* loop: subscriptions */
	struct ferry__fb_builder fb;	     /* loop: resubscribe messages */
	uint8_t token[FERRY__GCS_TOKEN_MAX]; /* cluster token */
	size_t token_len;		     /* its bytes */
	unsigned nshards;		     /* length of shards */
	struct shard shards[];		     /* one per GCS shard */
};

/* gcs/client_api.c: ferry__gcs_client_call() on the message built in @b (@built: the build's
 * result; @b is finished here either way). */
int ferry__gcs_client_call_built(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
				 struct ferry__fb_builder *b, int built, uint64_t seq,
				 struct ferry__gcs_csub *sub, struct ferry__gcs_result *res);

/* gcs/client_api.c, loop thread: deliver a verified GcsPublish from @s. */
void ferry__gcs_client_deliver(struct shard *s, const void *payload);
/* Remove @sub (subscribe refused) from the client's list and free it. */
void ferry__gcs_client_sub_drop(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub);
void ferry__gcs_client_subs_free(struct ferry_gcs_client *c);

#endif
