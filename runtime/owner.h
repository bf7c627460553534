/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Owners and borrowers (schema/runtime.fbs, the owner's socket): the owner's side serves its
 * objects to processes that hold refs to them (owner_srv.c, on the runtime's loop); the
 * borrower's side asks an owner for an object and takes or gives back counts on it
 * (borrow.c, blocking calls from the API's threads).
 */
#ifndef FERRY_RUNTIME_OWNER_H
#define FERRY_RUNTIME_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>
#include <ferry/runtime.h>

/* A decoded message of a borrower (ObjectGet or BorrowUpdate). */
struct ferry__rt_owner_msg {
	uint16_t type;		   /* FERRY__WIRE_MSG_OBJECT_GET / _BORROW_UPDATE */
	uint64_t request_id;	   /* echoed in the reply */
	struct ferry_object_id id; /* the object (not nil) */
	int32_t delta;		   /* BorrowUpdate: 1 or -1 */
};

/*
 * ferry__rt_owner_decode() - verify and decode @payload (@len bytes, untrusted) of @type as a
 * borrower's message to an owner. 0 and *@out; -EPROTO (malformed, or not such a message),
 * -EINVAL (a nil object id, a delta other than 1 or -1). Pure: the fuzz target runs it.
 */
int ferry__rt_owner_decode(uint16_t type, const void *payload, size_t len,
			   struct ferry__rt_owner_msg *out);

/* ferry__rt_owner_path() - owner @owner's socket on the node whose store is @store_socket:
 * "<its directory>/o-<owner hex>.sock". 0 or -ENAMETOOLONG. */
int ferry__rt_owner_path(const char *store_socket, const struct ferry_worker_id *owner, char *out,
			 size_t size);

/* owner_srv.c, loop thread (through ferry__loop_call): serve this owner's socket, and stop
 * (gets still waiting are answered -ENOENT). 0 or -errno (logged; borrowers then see the
 * owner as dead). */
int ferry__rt_owner_srv_start(void *arg);
int ferry__rt_owner_srv_stop(void *arg);
/* Any thread, ferry__rt.lock held: an object became ready (borrowers may wait for it). */
void ferry__rt_owner_srv_ready(void);

/*
 * borrow.c. ferry__rt_borrow_get() - ask @ref's owner for its object, waiting until
 * @deadline_ms (< 0: none). 0 with *@out a view of a copy of its bytes (view kind
 * FERRY__RT_VIEW_COPY), 1 when the object is in the store (get it there), or -errno with
 * @out->error saying why: -EOWNERDEAD (the owner's socket refuses: it died), -ETIMEDOUT,
 * -ENOENT, or the object's own error.
 */
#define FERRY__RT_VIEW_COPY 3
int ferry__rt_borrow_get(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out);

/*
 * A ferry_wait's watch on other owners' objects. _start() asks the owner of every ref of
 * @refs[0..@n) that is not @ready and not this process's own (those with a socket on this
 * host) for it, once; NULL when out of memory (the wait then looks at the store only).
 * _poll() waits up to @timeout_ms for answers, how many came, reading each by @deadline_ms
 * (the wait's, so that an owner that sends half a reply cannot hold the wait past it; < 0:
 * none, then an owner silent mid-reply for 10 s is taken as dead); _answered() says whether ref @i
 * was answered: ready, in the store, failed, or its owner died (a get returns now). _end()
 * closes the connections (the owners drop the gets still waiting). Blocking; API threads.
 */
struct ferry__rt_borrow_watch;
struct ferry__rt_borrow_watch *ferry__rt_borrow_watch_start(const struct ferry_ref *refs, size_t n,
							    const int *ready);
size_t ferry__rt_borrow_watch_poll(struct ferry__rt_borrow_watch *w, int timeout_ms,
				   int64_t deadline_ms);
bool ferry__rt_borrow_watch_answered(const struct ferry__rt_borrow_watch *w, size_t i);
void ferry__rt_borrow_watch_end(struct ferry__rt_borrow_watch *w);

/* ferry__rt_borrow_update() - take (@delta 1) or give back (-1) one count on @ref's object at
 * its owner, over this process's connection to that owner (its counts go when the
 * connection closes). 0, -ENOENT, -EOWNERDEAD, -ENOMEM. Any thread. */
int ferry__rt_borrow_update(const struct ferry_ref *ref, int delta);

/* ferry__rt_borrow_fini() - close every connection to an owner (shutdown). */
void ferry__rt_borrow_fini(void);

#endif
