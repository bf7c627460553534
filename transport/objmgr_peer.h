/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The endpoint bookkeeping the object manager's pull engines share (objmgr_tcp.c over the TCP
 * engine, objmgr_rdma.c over the RDMA engine): a keyed set of peers (one engine endpoint each),
 * the pull steps attached to each peer, and every step's deadline. The engine supplies what
 * touches its endpoint and its steps through struct ferry__objmgr_peer_ops; its own peer and
 * step structs embed struct ferry__objmgr_peer and struct ferry__objmgr_step
 * (FERRY_CONTAINER_OF gets them back).
 *
 * DESIGN
 * - Everything runs on the object manager's loop thread.
 * - A peer is made on first use by key (the engine formats it: "ip:port", "ip:port#qp"); the
 *   layer allocates ops->peer_size bytes and ops->connect() starts the endpoint. The engine's
 *   endpoint callbacks call ferry__objmgr_peer_connected() and ferry__objmgr_peer_closed().
 * - A step is attached to a peer with ferry__objmgr_step_attach(): its deadline starts, and
 *   ops->go() starts it at once when the endpoint is up, else at the connect. A step whose
 *   go() fails, whose endpoint fails to connect or is dropped, gets ops->fail(): the engine
 *   finishes it at once or, when one of its engine callbacks is still owed, at that callback
 *   (a dropped peer detaches such steps). To finish a step the engine calls
 *   ferry__objmgr_step_end() (deadline stopped, detached) and hands it back; the layer does
 *   not touch it after that.
 * - A deadline that passes drops the step's peer with -ETIMEDOUT (a stalled endpoint holds up
 *   every step on it), or fails the step alone when it is detached already.
 * - Dropping a peer: out of the set, every step failed with the reason, ops->close() (the
 *   engine's own state and the endpoint), freed. Engine callbacks that run inside close find
 *   their steps detached.
 */
#ifndef FERRY_TRANSPORT_OBJMGR_PEER_H
#define FERRY_TRANSPORT_OBJMGR_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/loop.h"

/* Room for a peer's key, with its terminating NUL. */
#define FERRY__OBJMGR_PEER_KEY 72

struct ferry__objmgr_peer;
struct ferry__objmgr_peer_set;

/* The common part of an engine's pull step. Zeroed before ferry__objmgr_step_attach(). */
struct ferry__objmgr_step {
	struct ferry__objmgr_peer *peer;   /* attached to; NULL before and after */
	struct ferry__objmgr_step *next;   /* peer->steps */
	struct ferry__loop_timer deadline; /* the step's (data: the set) */
	const char *ip;			   /* the server (for the deadline's log line) */
	uint16_t port;			   /* its port */
	bool started;			   /* ops->go() was called */
};

/* The common part of an engine's peer. */
struct ferry__objmgr_peer {
	struct ferry__objmgr_peer_set *set; /* owner */
	char key[FERRY__OBJMGR_PEER_KEY];   /* the engine's */
	bool up;			    /* connected */
	struct ferry__objmgr_step *steps;   /* attached: started, or waiting for up */
	struct ferry__objmgr_peer *next;    /* set->list */
};

/* What the engine does; all on the loop. */
struct ferry__objmgr_peer_ops {
	size_t peer_size;   /* the engine's peer struct */
	size_t peer_offset; /* its struct ferry__objmgr_peer */
	const char *name;   /* log lines: "" or "RDMA " */
	const char *over;   /* a failed connect's log line: "" or "over RDMA " */
	int connect_error;  /* a failed connect's steps get it (-ETIMEDOUT stays -ETIMEDOUT) */
	/* Start @peer's endpoint to @ip:@port (key and set filled, the rest zero, not in the set
	 * yet): 0, or -errno (the layer frees it). */
	int (*connect)(struct ferry__objmgr_peer *peer, const char *ip, uint16_t port);
	/* @peer is out of the set and has no steps: drop the engine's state and destroy the
	 * endpoint (the layer frees the peer). */
	void (*close)(struct ferry__objmgr_peer *peer);
	/* Start @s on its peer's endpoint (up): 0, or -errno (the layer then calls fail). */
	int (*go)(struct ferry__objmgr_step *s);
	/* Fail @s with @status: finish it now, or record the status for the engine callback still
	 * owed to it, which finishes it. */
	void (*fail)(struct ferry__objmgr_step *s, int status);
	/* Optional: @s leaves s->peer (still set): forget the engine's references to it. */
	void (*detach)(struct ferry__objmgr_step *s);
	/* Optional: after a deadline did its work (an entry from outside the engine). */
	void (*kick)(struct ferry__objmgr_peer_set *set);
};

/* The peers of one engine. */
struct ferry__objmgr_peer_set {
	const struct ferry__objmgr_peer_ops *ops; /* the engine's */
	struct ferry__loop *loop;		  /* the deadlines' */
	unsigned timeout_ms;			  /* every step's deadline */
	struct ferry__objmgr_peer *list;	  /* the peers */
};

void ferry__objmgr_peer_set_init(struct ferry__objmgr_peer_set *set,
				 const struct ferry__objmgr_peer_ops *ops, struct ferry__loop *loop,
				 unsigned timeout_ms);
/* Drop every peer with @reason (the engine stops). */
void ferry__objmgr_peer_drop_all(struct ferry__objmgr_peer_set *set, int reason);

/* The peer named @key, or NULL. */
struct ferry__objmgr_peer *ferry__objmgr_peer_find(struct ferry__objmgr_peer_set *set,
						   const char *key);
/* The peer named @key, made (connecting to @ip:@port) when there is none: 0 and *@out, or the
 * error of the allocation or ops->connect(). */
int ferry__objmgr_peer_get(struct ferry__objmgr_peer_set *set, const char *key, const char *ip,
			   uint16_t port, struct ferry__objmgr_peer **out);
/* The engine's on_connect: @status 0 starts the steps waiting for it; an error drops @peer. */
void ferry__objmgr_peer_connected(struct ferry__objmgr_peer *peer, int status);
/* The engine's on_close: drop @peer (-ETIMEDOUT, else -ECONNRESET for its steps). */
void ferry__objmgr_peer_closed(struct ferry__objmgr_peer *peer, int reason);
/* Out of the set, every step failed with @reason, ops->close(), freed. */
void ferry__objmgr_peer_drop(struct ferry__objmgr_peer *peer, int reason);

/* Attach @s (started neither here nor elsewhere) to @peer with a deadline; start it now when
 * the endpoint is up. @ip and @port name the server in log lines (they must outlive @s). */
void ferry__objmgr_step_attach(struct ferry__objmgr_step *s, struct ferry__objmgr_peer *peer,
			       const char *ip, uint16_t port);
/* Off its peer (no-op when not attached); the deadline keeps running. */
void ferry__objmgr_step_detach(struct ferry__objmgr_step *s);
/* Before the engine hands @s back: deadline stopped, detached. */
void ferry__objmgr_step_end(struct ferry__objmgr_step *s);

#endif
