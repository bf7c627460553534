/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private state of the plasma client, shared by client.c (the API: shared-memory operations
 * and the requests) and client_io.c (the socket: connecting, framing, and one socket shared by
 * every thread of the client).
 *
 * DESIGN (threads): a client may be used by many threads. Shared-memory operations on the
 * client's slot (pins, local creates, seals) must be serialised (index.h), so they take @lock,
 * held for a few hundred nanoseconds. Requests to the store share the socket: a request is
 * registered (its seq) under @io_lock, sent whole under @send_lock, and its caller then waits.
 * Replies may come out of order (a get waits for its objects), so whichever waiting thread
 * finds nobody reading becomes the reader: it reads frames and hands each reply to the thread
 * whose seq it carries, until its own has come, then wakes the others so one of them takes
 * over. No thread reads while holding a lock, but for chunk_lock, which only creators take:
 * a refill (a create that also asks for a new chunk) holds it across its round trip so that no
 * local create runs while the store retires the old chunk. Lock order: chunk_lock, then lock,
 * then send_lock or io_lock (never the other way); send_lock and io_lock are never held
 * together.
 */
#ifndef FERRY_PLASMA_CLIENT_INT_H
#define FERRY_PLASMA_CLIENT_INT_H

#include <pthread.h>
#include <stdbool.h>

#include <ferry/plasma.h>

#include "common/fb.h"
#include "common/frame.h"
#include "common/hashmap.h"
#include "common/wire.h"
#include "plasma/arena.h"
#include "plasma/index.h"

/* How a view's pin was taken (handle_flags). */
#define FERRY__PC_VIEW_LOCAL 1u /* in shared memory, on our slot */
#define FERRY__PC_VIEW_STORE 2u /* by the store on our behalf: released with a notice */

/* One request waiting for its reply. Lives on its caller's stack. */
struct ferry__pc_pending {
	struct ferry__pc_pending *next; /* in the client's list */
	uint64_t seq;			/* the request's seq */
	uint16_t reply_type;		/* the reply expected */
	bool done;			/* the reply (or an error) is in */
	int status;			/* 0: buf holds the reply; else -errno */
	uint8_t *buf;			/* the reply's payload (ferry__malloc'd, verified) */
	size_t len;			/* its bytes */
};

struct ferry_plasma_client {
	int fd;				    /* socket to the store */
	char *socket_path;		    /* its path (subscriptions connect again) */
	struct ferry__plasma_arena arena;   /* object bytes, mapped */
	struct ferry__plasma_arena control; /* the index, mapped */
	struct ferry__plasma_index ix;	    /* view over both */
	uint32_t slot;			    /* our client slot */
	uint64_t chunk_bytes;		    /* chunk size to ask for on a refill; 0: none */
	uint64_t local_max;		    /* creates up to this size go to the chunk */
	struct ferry_worker_id owner;	    /* owns what we create unless a call names another;
					     * nil: the node (connect opts) */
	pthread_mutex_t lock;		    /* slot operations and @creating */
	pthread_mutex_t chunk_lock;	    /* local creates vs the refill that retires the chunk */
	struct ferry__hashmap creating;	    /* ObjectID -> struct ferry__plasma_object */
	pthread_mutex_t send_lock;	    /* one frame on the socket at a time; @later */
	uint8_t *later;			    /* notices held back (frames), sent before the next
					     * frame or at ferry__plasma_client_flush() */
	size_t later_len, later_cap;	    /* bytes held, buffer size */
	unsigned later_count;		    /* notices held */
	bool later_nonblock;		    /* notices never wait for the socket: the store
					     * is served by the thread that sends them */
	pthread_mutex_t io_lock;	    /* pending, next_seq, reading, io_error */
	pthread_cond_t io_cond;		    /* a reply came, or the reader role is free */
	struct ferry__pc_pending *pending;  /* requests waiting for replies */
	uint64_t next_seq;		    /* seq of the next request */
	bool reading;			    /* a thread is reading the socket */
	int io_error;			    /* sticky: the connection is gone (-errno) */
	struct ferry__frame_parser parser;  /* used by the reader only */
};

/* client_io.c */

/* A connected Unix socket to @path, retrying up to @wait_ms while it is missing or refusing.
 * Returns the fd or -errno. */
int ferry__pc_socket(const char *path, unsigned wait_ms);

/* Write all @len bytes to socket @fd. Returns 0, -ECONNRESET (peer gone) or -errno. */
int ferry__pc_write_all(int fd, const uint8_t *p, size_t len);

/* Before the client is shared: send PlasmaConnect and read its reply and the fds passed with
 * it (*@fds, *@nfds; the caller closes them). *@reply: the verified payload, ferry__malloc'd.
 * Returns 0 or -errno. */
int ferry__pc_hello(struct ferry_plasma_client *c, const char *name, uint64_t chunk_bytes,
		    uint8_t **reply, size_t *len, int *fds, unsigned *nfds);

/* Register @p for a reply of @reply_type; returns its seq (0 and p->status set on error). */
uint64_t ferry__pc_begin(struct ferry_plasma_client *c, struct ferry__pc_pending *p,
			 uint16_t reply_type);

/*
 * Send what @b holds (@built: its build result) as @type, then wait for @p's reply (@p NULL:
 * a notice, no reply). @b is finalised. Returns 0 (p->buf holds the reply; free it with
 * ferry__free) or -errno (the request failed: -ECONNRESET, -ENOMEM, -EPROTO ...).
 */
int ferry__pc_finish(struct ferry_plasma_client *c, struct ferry__pc_pending *p, uint16_t type,
		     struct ferry__fb_builder *b, int built);

/*
 * Hold notice @b (@type; @built: its build result) back until the next frame or
 * ferry__pc_flush(), so that a burst of notices wakes the store once; with @now, send it (and
 * those before it) at once. The order of all frames on the socket stays as sent. Returns 1
 * when it is the only notice held, or when some could not go without waiting (later_nonblock:
 * the caller must see to a flush), 0, or -errno. @b is finalised.
 */
int ferry__pc_send_later(struct ferry_plasma_client *c, uint16_t type, struct ferry__fb_builder *b,
			 int built, bool now);

/* Send the notices held back, if any. 0 or -errno; with @try_only on a later_nonblock client,
 * -EAGAIN when some are still held (the socket is full: flush again later). */
int ferry__pc_flush(struct ferry_plasma_client *c, bool try_only);

/* Tear down what client_io.c set up (parser; the fd is closed by the caller). */
void ferry__pc_io_fini(struct ferry_plasma_client *c);

#endif
