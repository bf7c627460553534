/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's insides, shared by gcs/client.c (loop, connections, the request path,
 * blocking waits), gcs/client_api.c and gcs/client_tables.c (public calls: async forms and
 * their decoders, blocking wrappers), gcs/client_subs.c (subscriptions, event delivery) and
 * gcs/client_batch.c (batch object lookup). Nothing else includes it.
 *
 * Thread model: fields marked "loop" belong to the loop thread; "lock" ones to c->lock.
 */
#ifndef FERRY_GCS_CLIENT_INT_H
#define FERRY_GCS_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "common/conn.h"
#include "common/fb.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "common/wire.h"
#include "gcs/client.h"

#define FERRY__GCS_TOKEN_MAX 4096
#define FERRY__GCS_HOST_MAX 256

struct creq;

/* A subscription (loop). With unsub set it is no subscription but the scope of an unsubscribe
 * request on its way to the loop. */
struct ferry__gcs_csub {
	struct ferry__gcs_csub *next;	   /* client's list */
	struct ferry__gcs_csub **pprev;	   /* ... the link to it there */
	struct ferry__gcs_csub *same;	   /* the next of the same scope (client's scope index) */
	struct ferry__gcs_csub *dead_next; /* the client's dead list (unsubscribed in a delivery) */
	struct creq *req;		   /* the subscribe that listed it, until it completes */
	uint8_t channel;		   /* enum ferry_gcs_channel */
	uint8_t key_size;		   /* 0: whole channel */
	uint8_t key[20];		   /* the key */
	bool unsub;			   /* an unsubscribe's scope (never in the list) */
	bool dead;	       /* unsubscribed while events were delivered: freed after */
	uint64_t shard_mask;   /* shards it is subscribed on */
	ferry_gcs_event_fn fn; /* the user's callback */
	void *arg;	       /* for fn */
};

/* A request waiting for its reply (loop once posted). */
struct creq {
	struct creq *next, *prev;	   /* loop: shard's pending list, oldest first */
	struct shard *shard;		   /* where it goes */
	ferry__gcs_reply_fn fn;		   /* completion, called once */
	void *arg;			   /* for fn */
	struct ferry__gcs_csub *sub;	   /* GcsSubscribe/GcsUnsubscribe: the scope, else NULL */
	struct ferry__loop_timer deadline; /* loop: fails the request at its deadline */
	uint64_t deadline_ms;		   /* CLOCK_MONOTONIC (ferry__loop_now_ms) */
	uint64_t seq;			   /* matches the reply */
	uint16_t type;			   /* MessageType */
	bool sub_listed;		   /* subscribe: sub is in the client's list */
	bool removed;			   /* unsubscribe: a local subscription was removed */
	void *payload;			   /* the built message (owned) */
	size_t len;			   /* its bytes */
};

struct shard {
	struct ferry_gcs_client *client;	 /* owner */
	unsigned index;				 /* shard number */
	char host[FERRY__GCS_HOST_MAX];		 /* address */
	uint16_t port;				 /* port */
	struct ferry__conn *conn;		 /* loop: current connection, or NULL */
	bool connected;				 /* loop: handshake done */
	bool ever_connected;			 /* lock: connected at least once */
	int last_error;				 /* lock: why the last attempt closed, -errno */
	enum ferry__conn_progress progress;	 /* lock: how far the last attempt got */
	struct sockaddr_storage local;		 /* lock: our end of the last connection */
	socklen_t local_len;			 /* lock: its length; 0 before the first */
	struct ferry__loop_timer reconnect;	 /* loop: next attempt */
	struct creq *head, *tail;		 /* loop: requests without a reply, oldest first */
	uint64_t epoch;				 /* loop: pub/sub epoch of the last batch, 0 none */
	uint64_t watermarks[FERRY_GCS_CH_COUNT]; /* loop: per channel, delivered up to */
};

struct ferry_gcs_client {
	struct ferry__loop *loop;	     /* the client's loop (own or the caller's) */
	pthread_t thread;		     /* runs an own loop */
	bool thread_started;		     /* thread is joinable */
	bool own_loop;			     /* the loop and its thread are the client's */
	_Atomic pthread_t loop_tid;	     /* the loop's thread, once known (own: thread;
					      * given: noted by its first pass) */
	atomic_bool loop_known;		     /* loop_tid is set: until then every call posts */
	atomic_bool closing;		     /* destroy began: no reconnects, no new requests */
	atomic_int refs;		     /* the owner, each posted request, each connection */
	unsigned delivering;		     /* loop: inside event delivery */
	pthread_mutex_t lock;		     /* connect state */
	pthread_cond_t cond;		     /* connect progress (CLOCK_MONOTONIC) */
	int connect_error;		     /* lock: a shard refused us (-EACCES) */
	unsigned timeout_ms;		     /* connect and every request's deadline */
	unsigned reconnect_ms;		     /* between attempts */
	atomic_uint_fast64_t next_seq;	     /* request seqs */
	struct ferry__wire_unique_id id;     /* random: the server deduplicates (id, seq) */
	struct ferry__gcs_csub *subs;	     /* loop: subscriptions */
	struct ferry__hashmap scopes;	     /* loop: scope (struct csub_scope) -> its subs */
	struct ferry__gcs_csub *dead;	     /* loop: marked dead during a delivery, to free */
	struct ferry__fb_builder fb;	     /* loop: resubscribe messages */
	uint8_t token[FERRY__GCS_TOKEN_MAX]; /* cluster token */
	size_t token_len;		     /* its bytes */
	uint8_t kind;			     /* FERRY__WIRE_PEER_KIND_*: what we say we are */
	unsigned nshards;		     /* length of shards */
	struct shard shards[];		     /* one per GCS shard */
};

/*
 * Blocking calls over their async forms: w = ferry__gcs_sync_new(c) (NULL on the loop thread or
 * short of memory), then FERRY__GCS_WAIT(c, w, &result, the async call with
 * ferry__gcs_sync_done, w as its callback): the async call's status (or its return value when
 * it failed), its result into *@result (NULL: freed).
 */
struct ferry__gcs_sync;
struct ferry__gcs_sync *ferry__gcs_sync_new(struct ferry_gcs_client *c);
void ferry__gcs_sync_done(void *arg, int status, void *result);
int ferry__gcs_sync_wait(struct ferry_gcs_client *c, struct ferry__gcs_sync *sync, int submitted,
			 void **result);
#define FERRY__GCS_WAIT(c, w, result, call) \
	ferry__gcs_sync_wait((c), (w), (w) ? (call) : 0, (result))

/* A public async call on its way: how its reply becomes the user's result (loop thread). */
struct ferry__gcs_acall;
typedef int (*ferry__gcs_decode_fn)(const struct ferry__gcs_reply *r,
				    const struct ferry__gcs_acall *a, void **result);
struct ferry__gcs_acall {
	ferry_gcs_done_fn cb;	     /* the user's callback */
	void *arg;		     /* for cb */
	ferry__gcs_decode_fn decode; /* NULL: the status alone */
	size_t n;		     /* decoder parameters: entries */
	int want;		     /* record type */
	void (*fill)(void);	     /* element filler (its own type: see the decoder) */
	size_t elem_size;	     /* element bytes */
};

/* gcs/client_api.c: send the message built in @b (@built: the build's result; @b finished here)
 * and complete @a (copied) through its decoder. 0 or -errno (then cb is never called). */
int ferry__gcs_async_built(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
			   struct ferry__fb_builder *b, int built, uint64_t seq,
			   const struct ferry__gcs_acall *a);

/* An object record (RESTORE_OBJ) into @out, locations and places copied into one allocation
 * (out->locations, freed by the caller). 0, -EPROTO, -ENOMEM. */
int ferry__gcs_decode_object(const void *data, size_t size, struct ferry_gcs_object_info *out);

/* True on the client's loop thread, where a blocking call would wait for itself. */
bool ferry__gcs_client_on_loop(const struct ferry_gcs_client *c);

/* Loop thread: the unsubscribe @scope reached the loop: remove the client's subscriptions of
 * that scope on @shard. Returns how many. */
unsigned ferry__gcs_client_subs_remove(struct ferry_gcs_client *c, unsigned shard,
				       const struct ferry__gcs_csub *scope);

/* gcs/client_api.c, loop thread: deliver a verified GcsPublish from @s. */
void ferry__gcs_client_deliver(struct shard *s, const void *payload);
/* The scope index, empty (client_init). */
void ferry__gcs_client_scopes_init(struct ferry_gcs_client *c);
/* Loop thread: @sub joins the client's list and scope index. 0, or -ENOMEM (not listed). */
int ferry__gcs_client_sub_list(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub);
/* Remove @sub (subscribe refused) from the client's list and free it. */
void ferry__gcs_client_sub_drop(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub);
void ferry__gcs_client_subs_free(struct ferry_gcs_client *c);

#endif
