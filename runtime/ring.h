/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Same-host rings between an owner and a worker (issue 23: same-host hops through shared
 * memory). ring.c is the ring itself: two single-producer single-consumer rings of fixed slots
 * in one shared mapping, and the checks that keep a reader safe from a peer that writes garbage
 * into it. ring_conn.c puts a ring pair beside a worker's socket on the runtime's loops: setup
 * over the socket (RingSetup, the memfd passed with SCM_RIGHTS), the wait (the loop's spin,
 * then an eventfd), the fallback to the socket and the order of messages across both.
 * ring_fd.c is the owner's side beside a plain blocking socket, for a compiled graph's driver.
 *
 * Thread model: a ring direction has one producer and one consumer thread (each process's
 * loop thread); the functions below take no locks. The peer is another process and untrusted:
 * everything read from the mapping is checked before use.
 */
#ifndef FERRY_RUNTIME_RING_H
#define FERRY_RUNTIME_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry__conn;
struct ferry__loop;

/* ---- ring.c: the rings in a mapping ---- */

/* The geometry the owner offers: slots of 1 KiB (a PushTask or ActorCall of small inline
 * arguments, or its reply, fits; larger ones take the socket), 512 each way: an actor's
 * pipeline of calls mostly fits. 1 MiB of memfd per worker socket, touched as used. */
#define FERRY__RING_SLOT_BYTES 1024u
#define FERRY__RING_SLOTS 512u
/* What a receiver accepts in a RingSetup (slots a power of two). */
#define FERRY__RING_SLOT_BYTES_MIN 128u
#define FERRY__RING_SLOT_BYTES_MAX 65536u
#define FERRY__RING_SLOTS_MAX 4096u
#define FERRY__RING_BYTES_MAX (64u << 20)
/* A slot: its header (payload length, message type), then the payload. */
#define FERRY__RING_SLOT_HEADER 8u

/* One direction's shared counters. The producer writes head, the consumer the rest; each
 * side's own line, so that the two do not share a cache line. */
struct ferry__ring_ctl {
	_Alignas(64) _Atomic uint32_t head; /* producer: slots written (wraps) */
	_Alignas(64) _Atomic uint32_t tail; /* consumer: slots read (wraps) */
	_Atomic uint32_t sleeping;	    /* consumer: not 0 while it does not poll */
	_Atomic uint32_t sock_seen;	    /* consumer: socket messages taken (ring_conn.c) */
};

/* The mapping: the two directions' counters, then direction 0's slots, then direction 1's.
 * Direction 0 is owner -> worker, 1 worker -> owner. */
#define FERRY__RING_CTL_BYTES 4096u

/* One side's view of one direction. pos is private: the producer's head or the consumer's
 * tail, never read back from the mapping (the peer could have changed it there). */
struct ferry__ring_dir {
	struct ferry__ring_ctl *ctl; /* in the mapping */
	uint8_t *slots;		     /* in the mapping */
	uint32_t slot_bytes;	     /* checked geometry */
	uint32_t nslots;	     /* a power of two */
	uint32_t pos;		     /* slots this side has written or read */
};

/*
 * ferry__ring_check() - is (@slot_bytes, @nslots) a geometry a receiver accepts, and @bytes
 * the mapping's size for it? 0 or -EINVAL. ferry__ring_bytes() - the size of the mapping
 * (unchecked geometry: call ferry__ring_check first when it is the peer's).
 */
int ferry__ring_check(uint32_t slot_bytes, uint32_t nslots, uint64_t bytes);
uint64_t ferry__ring_bytes(uint32_t slot_bytes, uint32_t nslots);

/* ferry__ring_dir_init() - direction @which (0 or 1) of the mapping at @base of a checked
 * geometry, at position 0 (both sides start there; the creator zeroed the mapping). */
void ferry__ring_dir_init(struct ferry__ring_dir *d, void *base, unsigned which,
			  uint32_t slot_bytes, uint32_t nslots);

/* The largest payload a slot takes. */
static inline size_t ferry__ring_payload_max(const struct ferry__ring_dir *d)
{
	return d->slot_bytes - FERRY__RING_SLOT_HEADER;
}

/*
 * ferry__ring_put() - producer: copy message @type (@len bytes of @payload) into the next slot
 * and publish it. 0; -EMSGSIZE (larger than a slot); -EAGAIN (full); -EPROTO (the consumer's
 * tail is not within a ring of ours: garbage; the ring must be dropped).
 */
int ferry__ring_put(struct ferry__ring_dir *d, uint16_t type, const void *payload, size_t len);

/*
 * ferry__ring_get() - consumer: copy the next message out into @buf (at least
 * ferry__ring_payload_max() bytes) and free its slot. 1 with *@type and *@len set; 0 when the
 * ring is empty; -EPROTO when the producer's head or the slot's length is garbage (nothing is
 * read past the slot; the ring must be dropped). The copy is what the caller verifies and
 * uses: the peer may rewrite the slot at any time.
 */
int ferry__ring_get(struct ferry__ring_dir *d, void *buf, uint16_t *type, size_t *len);

/* ferry__ring_pending() - consumer: whether a message (or garbage) waits. */
bool ferry__ring_pending(const struct ferry__ring_dir *d);

/*
 * ferry__ring_wake() - producer, after a put: write the eventfd @fd if the consumer sleeps
 * with a sleeping word it was not woken for yet (*@woken, updated). 0, or the write's -errno.
 */
int ferry__ring_wake(struct ferry__ring_dir *d, uint32_t *woken, int fd);

/* ---- ring_conn.c: a ring pair beside a worker's socket, on a loop ---- */

struct ferry__rt_ring;

/* The socket's on_message, which ring messages are delivered through (with the socket's conn). */
typedef void (*ferry__rt_ring_deliver_fn)(struct ferry__conn *conn, uint16_t type,
					  const void *payload, size_t len);

/*
 * Knobs, read from the environment once per process (workers inherit their node's):
 * FERRY_RING=0 (or off) keeps every message on the sockets, as before the rings.
 * FERRY_RING_SPIN_US: how long the runtime's loops poll after work before they sleep (the
 * loop's spin window, ferry__loop_opts.spin_us); default FERRY__RT_RING_SPIN_US, 0 = always
 * sleep (a ring message then costs its consumer an eventfd wake-up). 0 when rings are off.
 * A compiled graph's caller polls its rings as long for a result (graph.c).
 */
#define FERRY__RT_RING_SPIN_US 50u
bool ferry__rt_ring_enabled(void);
unsigned ferry__rt_ring_spin_us(void);

/*
 * ferry__rt_ring_offer() - owner: make a ring pair for the worker socket @conn (on @loop, a
 * Unix socket), send RingSetup with its fds and start reading the worker's ring, through
 * @deliver. Until the worker's RingSetupReply, messages go on the socket. 0 and *@out, or
 * -errno (logged; the socket goes on alone).
 */
int ferry__rt_ring_offer(struct ferry__loop *loop, struct ferry__conn *conn,
			 ferry__rt_ring_deliver_fn deliver, struct ferry__rt_ring **out);

/*
 * ferry__rt_ring_setup_reply() - owner, from on_message: the worker's RingSetupReply for *@rp.
 * Status 0: sends use the ring from now on. Else (or no ring, or a malformed reply) the ring
 * is closed and *@rp set to NULL. Returns the status.
 */
int ferry__rt_ring_setup_reply(struct ferry__rt_ring **rp, const void *payload, size_t len);
/*
 * ferry__rt_ring_reply_status() - a verified RingSetupReply's status: 0, the worker's -errno
 * (logged with its message and @peer), or -EPROTO (logged) when no ring was @offered.
 */
int ferry__rt_ring_reply_status(const void *payload, bool offered, const char *peer);

/*
 * ferry__rt_ring_accept() - worker, from on_message: map the owner's RingSetup (@payload,
 * verified; its fds taken from @conn), start reading, answer RingSetupReply. 0 and *@out;
 * else -errno (logged, the reply says why; a second RingSetup on one socket is -EEXIST).
 */
int ferry__rt_ring_accept(struct ferry__loop *loop, struct ferry__conn *conn, const void *payload,
			  size_t len, ferry__rt_ring_deliver_fn deliver,
			  struct ferry__rt_ring **out);

/*
 * ferry__rt_ring_send() - send message @type on @r's ring when it can take it, else on @conn
 * (@r NULL: always the socket). Every message on a socket with a ring must go through here,
 * so that the order of both stays one. ferry__conn_send()'s returns (-ENOTCONN once closing).
 */
int ferry__rt_ring_send(struct ferry__rt_ring *r, struct ferry__conn *conn, uint16_t type,
			const void *payload, size_t len);

/*
 * ferry__rt_ring_on_socket() - call first in on_message for every message read from the socket
 * (@r NULL: no-op, true): ring messages written before it are delivered first. Returns whether
 * to handle the socket's message (false: the connection closed meanwhile), and true for the
 * ring's own deliveries (they come through the same on_message).
 */
bool ferry__rt_ring_on_socket(struct ferry__rt_ring *r, struct ferry__conn *conn, uint16_t type);

/* ferry__rt_ring_close() - the socket closed or the ring is given up: nothing more is read
 * or written; freed once the loop let go of it. NULL is a no-op. */
void ferry__rt_ring_close(struct ferry__rt_ring *r);

/* ferry__rt_ring_counts() - messages this process sent through rings and, on a socket that
 * had a ring, through the socket (tests, diagnostics). */
void ferry__rt_ring_counts(uint64_t *ring_msgs, uint64_t *socket_msgs);

/* ferry__rt_ring_memfd() - a memfd of @bytes sealed against shrinking and growing, mapped
 * shared into *@base: the fd, or -errno. ferry__rt_ring_count() - count one message sent
 * on a ring (@on_ring) or on the socket beside one (ferry__rt_ring_counts()). */
int ferry__rt_ring_memfd(uint64_t bytes, void **base);
void ferry__rt_ring_count(bool on_ring);

/* ---- ring_fd.c: a ring pair beside a blocking socket, for threads that are not a loop ---- */

/*
 * The owner's side of a ring pair on a plain blocking Unix socket (a compiled graph's driver,
 * runtime/graph.c): the same rings, setup (RingSetup) and order rules as above, but the
 * caller's threads write and read it. One thread at a time sends (the caller's lock) and one
 * at a time reads; the worker's side is ferry__rt_ring_accept() on its loop, as for any owner.
 */
struct ferry__rt_fdring;

/* What a reader does with a message taken from the ring (copied out and verified). */
typedef void (*ferry__rt_fdring_deliver_fn)(void *arg, uint16_t type, const void *payload,
					    size_t len);

/*
 * ferry__rt_fdring_offer() - make a ring pair and send RingSetup with its fds on @fd (a
 * connected blocking Unix socket, after RuntimeConnect). Until the worker's RingSetupReply
 * (ferry__rt_fdring_setup_reply()) everything goes on the socket. 0 and *@out, or -errno
 * (logged; the socket goes on alone, unless the error came from writing it).
 */
int ferry__rt_fdring_offer(int fd, struct ferry__rt_fdring **out);

/* ferry__rt_fdring_setup_reply() - the worker's RingSetupReply came on the socket: as
 * ferry__rt_ring_setup_reply() (a refusal destroys the ring and sets *@rp NULL). */
int ferry__rt_fdring_setup_reply(struct ferry__rt_fdring **rp, const void *payload, size_t len);

/*
 * ferry__rt_fdring_put() - sender: message @type into the ring if it may go there (ready, it
 * fits, not full, the worker took every message sent on the socket). 0: sent (the worker
 * woken if it sleeps); 1: send it on the socket, then call ferry__rt_fdring_sent(); -EPROTO:
 * the worker wrote garbage into the counters (logged: treat the worker as gone). @r NULL: 1.
 */
int ferry__rt_fdring_put(struct ferry__rt_fdring *r, uint16_t type, const void *payload,
			 size_t len);
void ferry__rt_fdring_sent(struct ferry__rt_fdring *r);

/*
 * Reader. ferry__rt_fdring_drain() - deliver what the worker's ring holds, at most one ring's
 * worth: how many, or -EPROTO (garbage, logged: treat the worker as gone).
 * ferry__rt_fdring_on_socket() - call before handling each message read from the socket: the
 * ring's earlier messages are delivered first (0, or -EPROTO as drain).
 * ferry__rt_fdring_pending() - whether the ring has something (false while not ready).
 * All accept @r NULL (nothing to do).
 */
int ferry__rt_fdring_drain(struct ferry__rt_fdring *r, ferry__rt_fdring_deliver_fn deliver,
			   void *arg);
int ferry__rt_fdring_on_socket(struct ferry__rt_fdring *r, uint16_t type,
			       ferry__rt_fdring_deliver_fn deliver, void *arg);
bool ferry__rt_fdring_pending(const struct ferry__rt_fdring *r);

/*
 * Reader's sleep. ferry__rt_fdring_sleep() - before sleeping in poll(2) (@asleep true: then
 * look at ferry__rt_fdring_pending() once more before sleeping) and after it (false);
 * returns the eventfd to poll for POLLIN while asleep, or -1 (not ready: nothing to poll).
 * ferry__rt_fdring_woken() - read that eventfd once poll said so.
 */
int ferry__rt_fdring_sleep(struct ferry__rt_fdring *r, bool asleep);
void ferry__rt_fdring_woken(struct ferry__rt_fdring *r);

/* ferry__rt_fdring_destroy() - unmap and close (the socket is the caller's). NULL: no-op. */
void ferry__rt_fdring_destroy(struct ferry__rt_fdring *r);

#endif
