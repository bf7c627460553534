/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A ring pair beside an owner's socket to a worker on this host (ring.h): the messages of
 * both directions go through shared memory when they fit, the socket stays for setup,
 * liveness and what does not fit.
 *
 * DESIGN
 * - Setup. The owner makes a memfd (sealed: the worker cannot shrink it under the owner's
 *   reads, nor the owner under the worker's), maps it, makes one eventfd per side and sends
 *   RingSetup with the three fds right after RuntimeConnect; it reads the worker's ring from
 *   the worker's RingSetupReply on and writes its own only after that reply. The worker checks
 *   the geometry, the memfd's size and seals and that the wake fds are eventfds before it maps
 *   anything, then answers (a refusal leaves the socket alone in charge).
 * - Order. A message goes on the ring unless it is larger than a slot, the ring is full, or a
 *   message the producer sent on the socket has not been taken yet: each consumer counts the
 *   socket messages it took (sock_seen, in the mapping) and the producer its own (sock_sent);
 *   while they differ everything goes on the socket. A consumer takes what its ring holds
 *   before each socket message (ferry__rt_ring_on_socket). So a direction's messages arrive in
 *   the order sent, whichever way each went: what the ring held when the socket message came
 *   was written before it, and nothing is written to the ring after it until it was taken.
 * - Wait. Consumers are the runtime's loops, which poll their rings while they spin after work
 *   (the loop's poller, window FERRY_RING_SPIN_US) and sleep in the kernel after that. Before
 *   sleeping a consumer sets its ring's sleeping word, then looks at the ring once more; a
 *   producer that published a message and sees the word set writes the consumer's eventfd,
 *   which the loop polls (both sides order their store and load with a full fence, so one of
 *   them sees the other's). Each sleep stores a new word (a count), and a producer writes once
 *   per word: a burst to a sleeping consumer costs one wake-up, a busy consumer none. (A
 *   consumer that looked again for 3 us after a find, to take bursts in one pass, was slower:
 *   on 2 cores that busy wait takes the CPU its producer needs.)
 * - The peer is untrusted. Indexes and lengths are checked (ring.c), a message is copied out
 *   and verified like a socket frame (ferry__wire_verify) before it is delivered, and a look
 *   takes at most one ring's worth. Garbage closes the socket (logged); the ring goes with
 *   the socket's on_close, which is also how a dead peer is noticed: its socket closes.
 * - Lifetime. A ring belongs to its loop's thread. ferry__rt_ring_close() stops all reading
 *   and writing at once; the struct and the mapping are freed only once the loop's poll of
 *   the eventfd has ended (a delivery in progress may still hold the message it was given).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/wire.h"
#include "runtime/ring.h"

#define COMP "ring"
#define MAX_SETS 8 /* loops with rings in one process (a worker has two) */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

struct ringset;

struct ferry__rt_ring {
	struct ferry__rt_ring *next;	   /* the loop's rings */
	struct ringset *set;		   /* that list's */
	struct ferry__conn *conn;	   /* the socket; NULL once closed */
	ferry__rt_ring_deliver_fn deliver; /* the socket's on_message */
	void *base;			   /* the mapping */
	size_t bytes;			   /* its size */
	struct ferry__ring_dir tx;	   /* ours to write */
	struct ferry__ring_dir rx;	   /* the peer's, ours to read */
	int wake_fd;			   /* the peer writes it while we sleep */
	int peer_wake_fd;		   /* we write it while the peer sleeps */
	struct ferry__loop_req poll_req;   /* wake_fd, multishot */
	uint8_t *buf;			   /* a message copied out of rx */
	uint32_t sock_sent;		   /* our socket messages since tx_counting */
	uint32_t sock_seen;		   /* the peer's socket messages taken since rx_counting */
	bool tx_ready;			   /* the peer reads the ring */
	bool rx_ready;			   /* we read the peer's ring */
	bool tx_counting;		   /* count our socket messages */
	bool rx_counting;		   /* count the socket's messages */
	bool spin;			   /* the loop polls while it spins */
	bool asleep;			   /* rx's sleeping word is not 0 */
	uint32_t sleeps;		   /* our sleeps so far: each a new sleeping word */
	uint32_t woken;			   /* the peer's sleeping word we last woke */
	bool polling;			   /* poll_req is pending */
	bool draining;			   /* delivering ring messages */
	bool closed;			   /* ferry__rt_ring_close() came */
};

/* A loop's rings and its poller. */
struct ringset {
	struct ferry__loop *loop;     /* NULL: a free entry */
	struct ferry__rt_ring *rings; /* on it */
};

static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER; /* entries taken and freed */
static struct ringset sets[MAX_SETS];
static _Atomic uint64_t sent_ring, sent_socket; /* ferry__rt_ring_counts() */

/* ---- knobs ---- */

bool ferry__rt_ring_enabled(void)
{
	const char *v = getenv("FERRY_RING");

	return !v || !(!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false"));
}

unsigned ferry__rt_ring_spin_us(void)
{
	const char *v = getenv("FERRY_RING_SPIN_US");
	char *end = NULL;
	unsigned long us;

	if (!ferry__rt_ring_enabled())
		return 0;
	if (!v || !*v)
		return FERRY__RT_RING_SPIN_US;
	us = strtoul(v, &end, 10);
	if (*end || us > FERRY_LOOP_MAX_SPIN_US) {
		FLOG_WARN(COMP, "FERRY_RING_SPIN_US=%s is not 0 to %u: using %u", v,
			  FERRY_LOOP_MAX_SPIN_US, FERRY__RT_RING_SPIN_US);
		return FERRY__RT_RING_SPIN_US;
	}
	return (unsigned)us;
}

void ferry__rt_ring_counts(uint64_t *ring_msgs, uint64_t *socket_msgs)
{
	*ring_msgs = atomic_load(&sent_ring);
	*socket_msgs = atomic_load(&sent_socket);
}

void ferry__rt_ring_count(bool on_ring)
{
	atomic_fetch_add_explicit(on_ring ? &sent_ring : &sent_socket, 1, memory_order_relaxed);
}

/* ---- delivery ---- */

/* The peer wrote garbage: the socket closes, its on_close closes the ring. */
static void broken(struct ferry__rt_ring *r, const char *what)
{
	FLOG_WARN(COMP, "%s: %s: closing the socket", r->conn ? ferry__conn_peer(r->conn) : "?",
		  what);
	r->tx_ready = r->rx_ready = false;
	if (r->conn)
		ferry__conn_close(r->conn);
}

/* Messages only the socket carries. */
static bool socket_only(uint16_t type)
{
	return type == FERRY__WIRE_MSG_RING_SETUP || type == FERRY__WIRE_MSG_RING_SETUP_REPLY ||
	       type == FERRY__WIRE_MSG_RUNTIME_CONNECT ||
	       type == FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY;
}

/* Deliver what the peer's ring holds, at most one ring's worth: how many. */
static int drain(struct ferry__rt_ring *r)
{
	uint16_t type;
	size_t len;
	int n = 0, ret;

	if (!r->rx_ready || r->draining || r->closed)
		return 0;
	r->draining = true;
	while (n < (int)r->rx.nslots && !r->closed && r->rx_ready && ferry__conn_is_open(r->conn)) {
		ret = ferry__ring_get(&r->rx, r->buf, &type, &len);
		if (ret == 0)
			break;
		if (ret < 0) {
			broken(r, "its ring's head or a slot's length is out of bounds");
			break;
		}
		if (socket_only(type) || ferry__wire_verify(type, r->buf, len) < 0) {
			broken(r, "a malformed message in its ring");
			break;
		}
		r->deliver(r->conn, type, r->buf, len);
		n++;
	}
	r->draining = false;
	return n;
}

/* Store @r's sleeping word: 0 while its loop polls, a new count for each sleep. */
static void set_asleep(struct ferry__rt_ring *r, bool asleep)
{
	if (asleep == r->asleep)
		return;
	if (asleep && ++r->sleeps == 0)
		r->sleeps = 1;
	atomic_store(&r->rx.ctl->sleeping, asleep ? r->sleeps : 0u);
	r->asleep = asleep;
}

/* A loop that does not spin sleeps again after each wake-up: a new word, then look. */
static void sleep_again(struct ferry__rt_ring *r)
{
	r->asleep = false;
	set_asleep(r, true);
	atomic_thread_fence(memory_order_seq_cst);
}

/* The loop's poller: on every spin pass (@sleeping false), and before it sleeps. */
static int poll_rings(void *arg, bool sleeping)
{
	struct ringset *s = arg;
	int n = 0;

	for (struct ferry__rt_ring *r = s->rings; r; r = r->next) {
		if (r->closed || !r->rx_ready)
			continue;
		set_asleep(r, sleeping);
		if (sleeping) /* then look once more (DESIGN: Wait) */
			atomic_thread_fence(memory_order_seq_cst);
		if (ferry__ring_pending(&r->rx))
			n += drain(r);
	}
	return n;
}

/* ---- the loop's rings ---- */

static struct ringset *set_of(struct ferry__loop *loop)
{
	struct ringset *s = NULL;

	pthread_mutex_lock(&sets_lock);
	for (unsigned i = 0; i < MAX_SETS && !s; i++)
		if (sets[i].loop == loop)
			s = &sets[i];
	for (unsigned i = 0; i < MAX_SETS && !s; i++)
		if (!sets[i].loop) {
			s = &sets[i];
			s->loop = loop;
			ferry__loop_set_poller(loop, poll_rings, s);
		}
	pthread_mutex_unlock(&sets_lock);
	return s;
}

static void ring_free(struct ferry__rt_ring *r)
{
	struct ringset *s = r->set;

	if (s) {
		for (struct ferry__rt_ring **pp = &s->rings; *pp; pp = &(*pp)->next)
			if (*pp == r) {
				*pp = r->next;
				break;
			}
		if (!s->rings) {
			pthread_mutex_lock(&sets_lock);
			ferry__loop_set_poller(s->loop, NULL, NULL);
			s->loop = NULL;
			pthread_mutex_unlock(&sets_lock);
		}
	}
	if (r->base)
		munmap(r->base, r->bytes);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	if (r->peer_wake_fd >= 0)
		close(r->peer_wake_fd);
	ferry__free(r->buf);
	ferry__free(r);
}

static void free_posted(void *arg, int status)
{
	(void)status;
	ring_free(arg);
}

static int arm(struct ferry__rt_ring *r);

static void on_wake(struct ferry__loop_req *req, int result)
{
	struct ferry__rt_ring *r = req->data;
	uint64_t v;

	if (!ferry__loop_req_pending(req)) {
		r->polling = false;
		if (r->closed) {
			ring_free(r);
			return;
		}
		if (result == -ECANCELED) /* the loop is going: the socket's on_close follows */
			return;
		if (arm(r) < 0) {
			broken(r, "cannot poll its ring's wake-ups");
			return;
		}
	}
	if (r->closed || result < 0)
		return;
	if (read(r->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		FLOG_WARN(COMP, "wake read: %s", ferry_strerror(-errno));
	if (r->spin) /* the loop polls from now on, until it sleeps again */
		set_asleep(r, false);
	else
		sleep_again(r);
	(void)drain(r);
}

static int arm(struct ferry__rt_ring *r)
{
	int ret = ferry__loop_poll(r->set->loop, &r->poll_req, r->wake_fd, POLLIN, true, on_wake);

	r->polling = ret == 0;
	return ret;
}

/* A new ring on @loop for @conn over the mapping @base (@bytes); @owner: which side. Takes
 * the mapping and both fds, also on failure. */
static int ring_new(struct ferry__loop *loop, struct ferry__conn *conn,
		    ferry__rt_ring_deliver_fn deliver, void *base, uint64_t bytes,
		    uint32_t slot_bytes, uint32_t nslots, bool owner, int wake_fd, int peer_wake_fd,
		    struct ferry__rt_ring **out)
{
	struct ferry__rt_ring *r = ferry__calloc(1, sizeof(*r));
	int ret;

	if (!r) {
		munmap(base, bytes);
		close(wake_fd);
		close(peer_wake_fd);
		return -ENOMEM;
	}
	r->conn = conn;
	r->deliver = deliver;
	r->base = base;
	r->bytes = bytes;
	r->wake_fd = wake_fd;
	r->peer_wake_fd = peer_wake_fd;
	r->poll_req.data = r;
	r->spin = ferry__loop_spin_us(loop) > 0;
	ferry__ring_dir_init(&r->tx, base, owner ? 0 : 1, slot_bytes, nslots);
	ferry__ring_dir_init(&r->rx, base, owner ? 1 : 0, slot_bytes, nslots);
	/* Asleep until the loop first polls: a producer that sees this wakes us. */
	set_asleep(r, true);
	r->buf = ferry__malloc(ferry__ring_payload_max(&r->rx));
	r->set = r->buf ? set_of(loop) : NULL;
	if (!r->set) {
		ret = r->buf ? -EUSERS : -ENOMEM;
		ring_free(r);
		return ret;
	}
	r->next = r->set->rings;
	r->set->rings = r;
	ret = arm(r);
	if (ret < 0) {
		ring_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

/* ---- setup ---- */

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

int ferry__rt_ring_memfd(uint64_t bytes, void **base)
{
	int fd = memfd_create("ferry-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING), ret;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, SEALS | F_SEAL_SEAL) < 0)
		goto err_close;
	*base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*base == MAP_FAILED)
		goto err_close;
	return fd;
err_close:
	ret = -errno;
	close(fd);
	return ret;
}

int ferry__rt_ring_offer(struct ferry__loop *loop, struct ferry__conn *conn,
			 ferry__rt_ring_deliver_fn deliver, struct ferry__rt_ring **out)
{
	uint64_t bytes = ferry__ring_bytes(FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS);
	struct ferry__wire_ring_setup m = {
		.slot_bytes = FERRY__RING_SLOT_BYTES, .slots = FERRY__RING_SLOTS, .bytes = bytes};
	struct ferry__fb_builder fb;
	int fds[3] = {-1, -1, -1}; /* memfd, the worker's wake, ours */
	struct ferry__rt_ring *r;
	void *base = NULL;
	int ret;

	fds[0] = ferry__rt_ring_memfd(bytes, &base);
	if (fds[0] < 0) {
		ret = fds[0];
		goto err;
	}
	fds[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fds[1] < 0 || fds[2] < 0) {
		ret = -errno;
		munmap(base, bytes);
		goto err;
	}
	/* The ring first: once the offer is out, the worker may answer and write at once. */
	ret = ring_new(loop, conn, deliver, base, bytes, m.slot_bytes, m.slots, true, fds[2],
		       fds[1], &r);
	if (ret < 0) {
		close(fds[0]);
		FLOG_WARN(COMP, "%s: no ring: %s", ferry__conn_peer(conn), ferry_strerror(ret));
		return ret;
	}
	ferry__fb_builder_init(&fb);
	ret = ferry__wire_ring_setup_build(&fb, &m);
	if (ret == 0)
		ret = ferry__conn_send_fds(conn, FERRY__WIRE_MSG_RING_SETUP,
					   ferry__fb_builder_data(&fb), ferry__fb_builder_size(&fb),
					   fds, 3);
	ferry__fb_builder_fini(&fb);
	close(fds[0]); /* the mapping stays; the eventfds are the ring's */
	if (ret < 0) {
		ferry__rt_ring_close(r);
		FLOG_WARN(COMP, "%s: cannot offer a ring: %s", ferry__conn_peer(conn),
			  ferry_strerror(ret));
		return ret;
	}
	r->tx_counting = true; /* the worker counts from RingSetup on */
	*out = r;
	return 0;

err:
	close_fds(fds, 3);
	FLOG_WARN(COMP, "%s: cannot make a ring: %s", ferry__conn_peer(conn), ferry_strerror(ret));
	return ret;
}

int ferry__rt_ring_reply_status(const void *payload, bool offered, const char *peer)
{
	struct ferry__wire_ring_setup_reply_view v =
		ferry__wire_ring_setup_reply_root_verified(payload);
	int status = ferry__wire_ring_setup_reply_status(v);
	const char *m = ferry__wire_ring_setup_reply_message(v);

	if (!offered) {
		FLOG_WARN(COMP, "%s: a RingSetupReply for no ring offered: ignored", peer);
		return -EPROTO;
	}
	if (status < 0)
		FLOG_WARN(COMP, "%s: the worker refused the ring: %s", peer,
			  m ? m : ferry_strerror(status));
	return status < 0 ? status : 0;
}

int ferry__rt_ring_setup_reply(struct ferry__rt_ring **rp, const void *payload, size_t len)
{
	struct ferry__rt_ring *r = *rp;
	bool offered = r && !r->closed && !r->rx_ready;
	int status = ferry__rt_ring_reply_status(
		payload, offered, r ? ferry__conn_peer(r->conn) : "a worker's socket");

	(void)len;
	if (!offered)
		return -EPROTO;
	if (status < 0) {
		ferry__rt_ring_close(r);
		*rp = NULL;
		return status;
	}
	r->tx_ready = true;
	r->rx_ready = true;
	r->rx_counting = true;
	if (!r->spin)
		sleep_again(r); /* its wake-up may have come before this */
	(void)drain(r);		/* written before its wake-up could be heard */
	return 0;
}

/* Whether @fd is an eventfd. */
static bool is_eventfd(int fd)
{
	char link[64], path[32];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = 0;
	return !strcmp(link, "anon_inode:[eventfd]");
}

/* Check and map the owner's offer; the fds are taken (closed on failure). */
static int map_offer(const void *payload, int fds[3], void **base, uint64_t *bytes,
		     uint32_t *slot_bytes, uint32_t *nslots, const char **why)
{
	struct ferry__wire_ring_setup_view v = ferry__wire_ring_setup_root_verified(payload);
	struct stat st;
	int seals;

	*slot_bytes = ferry__wire_ring_setup_slot_bytes(v);
	*nslots = ferry__wire_ring_setup_slots(v);
	*bytes = ferry__wire_ring_setup_bytes(v);
	*why = "three fds: a memfd and two eventfds";
	if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0 || !is_eventfd(fds[1]) || !is_eventfd(fds[2]))
		return -EBADF;
	*why = "a geometry out of bounds";
	if (ferry__ring_check(*slot_bytes, *nslots, *bytes) < 0)
		return -EINVAL;
	seals = fcntl(fds[0], F_GET_SEALS);
	*why = "a memfd of another size, or not sealed against shrinking and growing";
	if (fstat(fds[0], &st) < 0 || (uint64_t)st.st_size != *bytes || seals < 0 ||
	    (seals & SEALS) != SEALS)
		return -EINVAL;
	*why = "the owner's eventfd cannot be made non-blocking";
	if (fcntl(fds[2], F_SETFL, O_NONBLOCK) < 0 || fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	*why = "mmap failed";
	*base = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (*base == MAP_FAILED)
		return -errno;
	return 0;
}

static int send_reply(struct ferry__conn *conn, int status, const char *message)
{
	struct ferry__wire_ring_setup_reply m = {.status = status, .message = message};
	struct ferry__fb_builder fb;
	int ret;

	ferry__fb_builder_init(&fb);
	ret = ferry__wire_ring_setup_reply_build(&fb, &m);
	if (ret == 0)
		ret = ferry__conn_send(conn, FERRY__WIRE_MSG_RING_SETUP_REPLY,
				       ferry__fb_builder_data(&fb), ferry__fb_builder_size(&fb));
	ferry__fb_builder_fini(&fb);
	return ret;
}

int ferry__rt_ring_accept(struct ferry__loop *loop, struct ferry__conn *conn, const void *payload,
			  size_t len, ferry__rt_ring_deliver_fn deliver,
			  struct ferry__rt_ring **out)
{
	const char *why = "a second RingSetup on one socket";
	uint32_t slot_bytes = 0, nslots = 0;
	uint64_t bytes = 0;
	void *base = NULL;
	int fds[3], ret = -EEXIST;

	(void)len;
	for (int i = 0; i < 3; i++) /* in the order sent (an initializer's order is unspecified) */
		fds[i] = ferry__conn_take_fd(conn);
	if (!*out)
		ret = map_offer(payload, fds, &base, &bytes, &slot_bytes, &nslots, &why);
	if (ret < 0) {
		close_fds(fds, 3);
		FLOG_WARN(COMP, "%s: ring refused: %s", ferry__conn_peer(conn), why);
		(void)send_reply(conn, ret, why);
		return ret;
	}
	close(fds[0]);
	ret = ring_new(loop, conn, deliver, base, bytes, slot_bytes, nslots, false, fds[1], fds[2],
		       out);
	if (ret < 0) {
		FLOG_WARN(COMP, "%s: ring refused: %s", ferry__conn_peer(conn),
			  ferry_strerror(ret));
		(void)send_reply(conn, ret, ferry_strerror(ret));
		return ret;
	}
	(*out)->rx_ready = true;
	(*out)->rx_counting = true; /* every socket message after RingSetup */
	ret = send_reply(conn, 0, NULL);
	if (ret < 0)
		return 0; /* the socket is closing: its on_close closes the ring */
	(*out)->tx_ready = true;
	(*out)->tx_counting = true; /* the owner counts from our reply on */
	return 0;
}

/* ---- send, receive, close ---- */

int ferry__rt_ring_send(struct ferry__rt_ring *r, struct ferry__conn *conn, uint16_t type,
			const void *payload, size_t len)
{
	int ret;

	if (r && !r->closed && r->tx_ready && ferry__conn_is_open(conn) &&
	    atomic_load_explicit(&r->tx.ctl->sock_seen, memory_order_acquire) == r->sock_sent) {
		ret = ferry__ring_put(&r->tx, type, payload, len);
		if (ret == 0) {
			ret = ferry__ring_wake(&r->tx, &r->woken, r->peer_wake_fd);
			if (ret < 0)
				FLOG_WARN(COMP, "wake write: %s", ferry_strerror(ret));
			atomic_fetch_add_explicit(&sent_ring, 1, memory_order_relaxed);
			return 0;
		}
		if (ret == -EPROTO) {
			broken(r, "its ring's tail is out of bounds");
			return -ENOTCONN;
		}
		/* -EMSGSIZE, -EAGAIN: the socket takes it. */
	}
	ret = ferry__conn_send(conn, type, payload, len);
	if (ret == 0 && r && !r->closed && r->tx_counting) {
		r->sock_sent++;
		atomic_fetch_add_explicit(&sent_socket, 1, memory_order_relaxed);
	}
	return ret;
}

bool ferry__rt_ring_on_socket(struct ferry__rt_ring *r, struct ferry__conn *conn, uint16_t type)
{
	if (!r || r->draining || r->closed || !r->rx_counting || socket_only(type))
		return true;
	(void)drain(r);
	if (r->closed || !ferry__conn_is_open(conn))
		return false;
	r->sock_seen++;
	atomic_store_explicit(&r->rx.ctl->sock_seen, r->sock_seen, memory_order_release);
	return true;
}

void ferry__rt_ring_close(struct ferry__rt_ring *r)
{
	int ret;

	if (!r || r->closed)
		return;
	r->closed = true;
	r->tx_ready = r->rx_ready = false;
	r->conn = NULL;
	if (!r->polling) { /* freed from a post: a poller or a drain may hold it now */
		ret = ferry__loop_post(r->set->loop, free_posted, r);
		if (ret == -ECANCELED)
			ring_free(r); /* the loop is being destroyed: nothing polls any more */
		else if (ret < 0)
			FLOG_WARN(COMP, "no memory to free a ring: %zu bytes stay mapped",
				  r->bytes);
		return;
	}
	ret = ferry__loop_cancel(&r->poll_req);
	if (ret < 0 && ret != -EALREADY)
		FLOG_WARN(COMP, "cannot cancel a ring's poll (%s): freed with the loop",
			  ferry_strerror(ret));
}
