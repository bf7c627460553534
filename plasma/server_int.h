/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private state of the plasma server, shared by server.c (lifecycle, connections, dispatch,
 * client cleanup), server_ops.c (the request handlers), server_wait.c (gets and waits that
 * block until objects are sealed) and server_events.c (hooks, subscribers, misses). Tests and the fuzz target use the client hooks at the end to
 * drive requests without a socket.
 */
#ifndef FERRY_PLASMA_SERVER_INT_H
#define FERRY_PLASMA_SERVER_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "common/conn.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "common/wire.h"
#include "plasma/server.h"
#include "plasma/store.h"

#define FERRY__PLASMA_NO_SLOT UINT32_MAX

/* Pins the store holds on one entry for all its clients: one bit in the entry's pin mask (the
 * store's slot), counted here rather than in the slot's pin records, which would bound them. */
struct ferry__plasma_held {
	uint32_t gen;	/* entry generation pinned */
	uint32_t count; /* pins; 0: the bit is clear */
};

/* Pins the store holds on a client's behalf (a get that went through the socket), by ID. */
struct ferry__plasma_store_pin {
	uint32_t index; /* entry slot */
	uint32_t gen;	/* entry generation */
	uint32_t count; /* pins held for this client */
};

/* A subscriber connection's bounded queue of events not sent yet. */
struct ferry__plasma_sub {
	struct ferry__wire_plasma_event *ring; /* cap events */
	uint32_t cap;			       /* events it holds at most */
	uint32_t head;			       /* oldest queued */
	uint32_t count;			       /* queued */
	uint32_t mask;			       /* 1 << PlasmaEventKind per wanted kind */
	uint64_t missed;		       /* dropped since the last batch sent */
	uint64_t notify_seq;		       /* seq of the last PlasmaNotify sent */
	uint32_t index;			       /* position in the server's subs */
};

/* What the server reported to on_miss (value of its missing map, by ObjectID). */
struct ferry__plasma_miss {
	uint32_t episode;    /* number of this report, so that old waits do not count */
	uint32_t waits;	     /* parked waits that still want it */
	uint64_t idle_since; /* ms when waits reached 0 */
};

/* One connected client. */
struct ferry__plasma_pclient {
	struct ferry__plasma_server *srv;   /* owner */
	struct ferry__conn *conn;	    /* its socket; NULL for a test or fuzz client */
	struct ferry__plasma_pclient *prev; /* in the server's client list */
	struct ferry__plasma_pclient *next; /* same */
	struct ferry__hashmap pins;	    /* ObjectID -> struct ferry__plasma_store_pin */
	uint32_t slot;			    /* index client slot; NO_SLOT before PlasmaConnect */
	int pid;			    /* its process, as the kernel says (0: unknown) */
	unsigned uid;			    /* its effective uid at connect (per-uid cap) */
	int pidfd;			    /* its process (-1: none); owned */
	bool closing;			    /* a protocol error closed it: ignore what follows */
	bool admitted;			    /* past PlasmaConnect once (a clean disconnect
					     * drops the slot, not this) */
	struct ferry__plasma_sub *sub;	    /* a subscriber connection: its queue; else NULL */
	uint64_t replies;		    /* messages sent to it (tests) */
	uint64_t accepted_ms;		    /* accepted at (ferry__loop_now_ms): connect deadline */
};

/* One object of a pending get or wait. */
struct ferry__plasma_wait_item {
	struct ferry_object_id id;	 /* requested ID */
	int status;			 /* 1 pending; 0 done (pinned for a get); or -errno */
	uint32_t miss_episode;		 /* counted in the missing map under it; 0: not */
	bool restoring;			 /* pending on a background restore of it */
	struct ferry__plasma_object obj; /* get: what was pinned */
};

/* A PlasmaGet or PlasmaWait that waits for seals. */
struct ferry__plasma_wait {
	struct ferry__plasma_wait *prev;	/* in the server's list */
	struct ferry__plasma_wait *next;	/* same */
	struct ferry__plasma_pclient *client;	/* who asked */
	struct ferry__loop_timer timer;		/* its timeout, if any */
	uint64_t seq;				/* request seq, echoed */
	uint16_t type;				/* FERRY__WIRE_MSG_PLASMA_GET or _WAIT */
	uint32_t n;				/* items */
	uint32_t pending;			/* items still waiting */
	uint32_t want;				/* wait: answer once this many are sealed */
	bool counted;				/* in the index's seal_waiters and _getters */
	bool expired;				/* its time is up: answer once no restore is
						 * pending (a spilled object counts as there) */
	struct ferry__plasma_wait_item items[]; /* n of them */
};

/* The slot of a departed client, not reusable yet (server_peers.c). */
struct ferry__plasma_parked {
	uint32_t slot; /* client slot */
	int pid;       /* its process (the kernel's word) */
	int pidfd;     /* the same (-1: none); owned */
	unsigned uid;  /* its uid: a parked slot counts against the uid's cap */
	bool clean;    /* it said goodbye: reuse once reclaimed, whatever the process does */
	bool retired;  /* its pins and objects are reclaimed */
};

struct ferry__plasma_server {
	char *socket_path;		       /* copied; NULL: no listener */
	struct ferry__plasma_store *store;     /* the store core */
	struct ferry__plasma_index *ix;	       /* its index */
	struct ferry__plasma_held *held;       /* per entry: pins the store holds */
	struct ferry__loop *loop;	       /* everything runs on it */
	struct ferry__conn_server *listener;   /* Unix socket server */
	struct ferry__loop_timer tick;	       /* collect, spill, parked slots, wait re-checks */
	struct ferry__fb_builder fb;	       /* replies are built here */
	struct ferry__plasma_pclient *clients; /* connected clients */
	struct ferry__plasma_wait *waits;      /* pending gets and waits */
	struct ferry__plasma_parked *parked;   /* departed clients' slots not reusable yet */
	uint32_t nparked;		       /* entries in parked */
	uint32_t connect_timeout_ms;	       /* PlasmaConnect due this long after accept */
	uint32_t max_connecting;	       /* connections before PlasmaConnect at once */
	uint64_t chunk_bytes;		       /* default chunk for a client */
	uint32_t max_per_uid;		       /* client slots one uid may hold */
	unsigned own_uid;		       /* the store's euid (not capped, nor is root) */
	uint64_t waits_seal_seq;	       /* the index's seal_seq at the last re-check */
	uint32_t tick_ms;		       /* tick period */
	struct ferry__wire_unique_id id;       /* this store instance */
	pthread_t thread;		       /* start(): the loop's thread */
	bool threaded;			       /* thread is running */
	bool own_loop;			       /* created loop (not opts.loop) */
	/* events (server_events.c) */
	void (*on_miss)(void *arg, const struct ferry_object_id *id);	  /* hook or NULL */
	void (*on_miss_end)(void *arg, const struct ferry_object_id *id); /* hook or NULL */
	void (*on_sealed)(void *arg, const struct ferry_object_id *id, uint64_t data_size,
			  uint32_t metadata_size, bool primary, const struct ferry_worker_id *owner,
			  const struct ferry__plasma_place *place);	 /* hook or NULL */
	void (*on_removed)(void *arg, const struct ferry_object_id *id); /* hook or NULL */
	void (*on_moved)(void *arg, const struct ferry_object_id *id, uint64_t data_size,
			 uint32_t metadata_size,
			 const struct ferry__plasma_place *place); /* or NULL */
	void *hook_arg;						   /* for the hooks */
	bool content_checks;	       /* the places the hooks report carry checks */
	uint32_t *announced;	       /* per entry: generation whose seal was reported */
	uint32_t announce_refs;	       /* hooks (1) + subscribers: > 0, every sealer notifies */
	struct ferry__hashmap missing; /* ObjectID -> struct ferry__plasma_miss */
	uint32_t miss_episodes;	       /* episodes reported so far */
	uint32_t miss_quiet_ms;	       /* an episode nobody waits for ends after this */
	struct ferry__plasma_pclient **subs; /* subscriber connections */
	uint32_t nsubs;			     /* ... how many */
	uint32_t subs_cap;		     /* ... room in subs */
	bool flush_posted;		     /* a flush of the subscribers' queues is posted */
};

/* server.c */

/* Send what srv->fb holds as @type (@built: the build's result). Returns 0 or -errno (the
 * client is then closed). */
int ferry__plasma_send(struct ferry__plasma_pclient *c, uint16_t type, int built);
/* A request broke the protocol: log it with @why and close the client. */
void ferry__plasma_fail(struct ferry__plasma_pclient *c, const char *why);
void ferry__plasma_reply_status(struct ferry__plasma_pclient *c, uint64_t seq, int status);

/* Client hooks (also for tests and the fuzz target: @conn NULL drops the replies). */
struct ferry__plasma_pclient *ferry__plasma_client_new(struct ferry__plasma_server *srv,
						       struct ferry__conn *conn);
/* Give back everything the client holds (pins, waits, slot); it stays, unconnected. @clean: it
 * said goodbye (its slot may be reused at once). */
void ferry__plasma_client_leave(struct ferry__plasma_pclient *c, bool clean);
/* Leave, then free it. */
void ferry__plasma_client_free(struct ferry__plasma_pclient *c);
/* Handle one request whose payload ferry__wire_verify() accepted. */
void ferry__plasma_handle(struct ferry__plasma_pclient *c, uint16_t type, const void *payload,
			  size_t len);

/* server_peers.c: who the clients are, slots per uid, slots parked until a process is gone. */

/* Fill @c's pid, uid and pidfd from the kernel (a client without a connection: this process).
 * Returns 0 or -errno. */
int ferry__plasma_identify(struct ferry__plasma_pclient *c);
/* A client slot for identified @c into *@slot, after reclaiming the slots of processes that are
 * gone. Returns 0 or -EUSERS (its uid is at its cap, or every slot is taken; logged). */
int ferry__plasma_admit(struct ferry__plasma_pclient *c, uint32_t *slot);
/* @c's slot is retired; reuse it now if @clean or its process is gone, else park it. Takes
 * @c's pidfd. */
void ferry__plasma_slot_release(struct ferry__plasma_pclient *c, bool clean);
/* Finish parked slots whose process is gone (tick, admission); free them all at destroy. */
void ferry__plasma_parked_sweep(struct ferry__plasma_server *srv);
void ferry__plasma_parked_fini(struct ferry__plasma_server *srv);

/* server_ops.c: one handler per request type (payload verified). */
void ferry__plasma_on_connect(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_disconnect(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_create(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_seal(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_abort(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_release(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_delete(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_contains(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_evict(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_list(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_stats(struct ferry__plasma_pclient *c, const void *payload);
/* Drop @n pins the store holds for @c on @id. Returns 0 or -ENOENT (it holds fewer). */
int ferry__plasma_unpin(struct ferry__plasma_pclient *c, const struct ferry_object_id *id,
			uint32_t n);
/* Give back every pin the store holds for @c. */
void ferry__plasma_unpin_all(struct ferry__plasma_pclient *c);

/* server_wait.c */
void ferry__plasma_on_get(struct ferry__plasma_pclient *c, const void *payload);
void ferry__plasma_on_wait(struct ferry__plasma_pclient *c, const void *payload);
/* Object @id was sealed: answer the waits it completes. */
void ferry__plasma_waits_sealed(struct ferry__plasma_server *srv, const struct ferry_object_id *id);
/* Look at every pending item again (a seal we were not told about; from the tick). */
void ferry__plasma_waits_recheck(struct ferry__plasma_server *srv);
/* A background restore of entry @index (generation @gen) ended with @status (the store's
 * on_restore_done): the gets waiting for it look again, or fail with the read's -errno. */
void ferry__plasma_waits_restored(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen,
				  int status);
/* Drop @c's waits without answering (it is going away). */
void ferry__plasma_waits_cancel(struct ferry__plasma_pclient *c);
/* Pin @id through the store's slot for @c. Returns 0, -ENOENT, -EINPROGRESS, -ENODATA, ... */
int ferry__plasma_pin_for(struct ferry__plasma_pclient *c, const struct ferry_object_id *id,
			  struct ferry__plasma_object *out);
/* Drop one pin the store holds on entry @index (generation @gen). Returns 1 if deferred
 * deletes may now be collected, else 0. */
int ferry__plasma_store_unpin(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen);

/* server_events.c */

/* Set up from @o (hooks; announcing seals from the start if any is set). Returns 0 or
 * -ENOMEM. fini accepts a server whose init failed or never ran (zeroed fields). */
int ferry__plasma_events_init(struct ferry__plasma_server *srv,
			      const struct ferry__plasma_server_opts *o);
void ferry__plasma_events_fini(struct ferry__plasma_server *srv);
/* The object @id (entry @o, read by the caller) is sealed: report it once (hook, subscribers),
 * and end its miss episode. */
void ferry__plasma_events_sealed(struct ferry__plasma_server *srv,
				 const struct ferry__plasma_object *o,
				 const struct ferry_object_id *id);
/* The store's on_removed hook (arg: the server). */
void ferry__plasma_events_removed(void *arg, uint32_t index, uint32_t gen, bool evicted);
/* Entry @index (generation @gen) was read back from spill: on_moved, if its seal was reported. */
void ferry__plasma_events_moved(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen);
/* Client slot @slot is going away: report seals it made whose notice never came. */
void ferry__plasma_events_client_gone(struct ferry__plasma_server *srv, uint32_t slot);
/* A parked wait wants @it, which is absent: report the miss unless already reported. */
void ferry__plasma_miss_note(struct ferry__plasma_server *srv, struct ferry__plasma_wait_item *it);
/* @it no longer waits (answered, timed out, or its client left). */
void ferry__plasma_miss_done(struct ferry__plasma_server *srv, struct ferry__plasma_wait_item *it);
/* From the tick: flush subscribers that were held back, forget quiet misses. */
void ferry__plasma_events_tick(struct ferry__plasma_server *srv);
/* PlasmaSubscribe (its own connection, before anything else). */
void ferry__plasma_on_subscribe(struct ferry__plasma_pclient *c, const void *payload);
/* Drop @c's subscription, if it has one. */
void ferry__plasma_sub_free(struct ferry__plasma_pclient *c);

#endif
