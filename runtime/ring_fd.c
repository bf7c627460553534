/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A ring pair beside a plain blocking Unix socket (ring.h, "ring_fd.c"): the owner's side for
 * callers that are not a loop, a compiled graph's driver (runtime/graph.c), whose caller's
 * thread writes the inputs and reads the output itself. The worker's side is the loop's
 * (ring_conn.c's ferry__rt_ring_accept): same rings, same RingSetup, same order rules.
 *
 * DESIGN
 * - Setup and order as ring_conn.c's DESIGN (Setup, Order): the memfd and the two eventfds go
 *   with RingSetup right after RuntimeConnect; the ring is written and read only after the
 *   worker's RingSetupReply; a message goes on the ring only when the worker took every one
 *   sent on the socket (sock_seen == sock_sent), and the reader takes what the ring holds
 *   before each socket message.
 * - Wait. The reader polls with ferry__rt_fdring_pending() while it spins; to sleep it stores
 *   a new sleeping word, looks once more, then polls the eventfd beside its sockets. While the
 *   reader is elsewhere the word is 0: the worker writes no eventfd for nobody, and the next
 *   reader looks at the ring before it sleeps anyway.
 * - Threads: the callers' locks make each direction single-producer single-consumer (one
 *   sender at a time, one reader at a time); nothing here locks.
 * - The peer is untrusted, as in ring_conn.c: indexes and lengths checked (ring.c), each
 *   message copied out and verified before delivery, at most one ring's worth per drain.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/wire.h"
#include "runtime/ring.h"

#define COMP "ring"

struct ferry__rt_fdring {
	void *base;		   /* the mapping */
	size_t bytes;		   /* its size */
	struct ferry__ring_dir tx; /* ours to write (owner -> worker) */
	struct ferry__ring_dir rx; /* the worker's, ours to read */
	int wake_fd;		   /* the worker writes it while we sleep */
	int peer_wake_fd;	   /* we write it while the worker sleeps */
	uint8_t *buf;		   /* a message copied out of rx */
	uint32_t sock_sent;	   /* our socket messages since the offer */
	uint32_t sock_seen;	   /* the worker's socket messages taken since its reply */
	uint32_t sleeps;	   /* our sleeps so far: each a new sleeping word */
	uint32_t woken;		   /* the worker's sleeping word we last woke */
	bool ready;		   /* the worker accepted: both rings in use */
	bool tx_broken;		   /* the sender saw garbage: it sends no more */
	bool rx_broken;		   /* the reader saw garbage: it reads no more */
};

void ferry__rt_fdring_destroy(struct ferry__rt_fdring *r)
{
	if (!r)
		return;
	if (r->base)
		munmap(r->base, r->bytes);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	if (r->peer_wake_fd >= 0)
		close(r->peer_wake_fd);
	ferry__free(r->buf);
	ferry__free(r);
}

/* Write the whole @frame on blocking @fd, @fds with its first byte (ring_conn.c's peer reads
 * them with the read that holds the frame's start). */
static int send_with_fds(int fd, const uint8_t *frame, size_t size, const int *fds, unsigned n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 3)];
		struct cmsghdr align;
	} cmsg = {0};
	/* sendmsg only reads the frame: the cast drops a const it cannot spell. */
	struct iovec iov = {.iov_base = (void *)(uintptr_t)frame, .iov_len = size};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *cm;
	size_t done = 0;
	ssize_t sent;

	m.msg_control = cmsg.buf;
	m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
	do
		sent = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (sent < 0)
		return -errno;
	done = (size_t)sent;
	while (done < size) {
		sent = send(fd, frame + done, size - done, MSG_NOSIGNAL);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0)
			return -errno;
		done += (size_t)sent;
	}
	return 0;
}

static int send_offer(int fd, const struct ferry__wire_ring_setup *m, const int *fds)
{
	struct ferry__fb_builder fb;
	const uint8_t *frame;
	size_t size;
	int ret;

	ferry__fb_builder_init(&fb);
	ret = ferry__wire_ring_setup_build(&fb, m);
	if (ret == 0)
		ret = ferry__frame_finish(&fb, FERRY__WIRE_MSG_RING_SETUP, &frame, &size);
	if (ret == 0)
		ret = send_with_fds(fd, frame, size, fds, 3);
	ferry__fb_builder_fini(&fb);
	return ret;
}

int ferry__rt_fdring_offer(int fd, struct ferry__rt_fdring **out)
{
	uint64_t bytes = ferry__ring_bytes(FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS);
	struct ferry__wire_ring_setup m = {
		.slot_bytes = FERRY__RING_SLOT_BYTES, .slots = FERRY__RING_SLOTS, .bytes = bytes};
	struct ferry__rt_fdring *r = ferry__calloc(1, sizeof(*r));
	int fds[3] = {-1, -1, -1}; /* memfd, the worker's wake, ours */
	int ret = -ENOMEM;

	if (!r)
		goto err;
	r->wake_fd = r->peer_wake_fd = -1;
	r->buf = ferry__malloc(FERRY__RING_SLOT_BYTES - FERRY__RING_SLOT_HEADER);
	if (!r->buf)
		goto err;
	fds[0] = ferry__rt_ring_memfd(bytes, &r->base);
	if (fds[0] < 0) {
		ret = fds[0];
		goto err;
	}
	r->bytes = bytes;
	r->peer_wake_fd = fds[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->wake_fd = fds[2] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fds[1] < 0 || fds[2] < 0) {
		ret = -errno;
		goto err;
	}
	ferry__ring_dir_init(&r->tx, r->base, 0, m.slot_bytes, m.slots);
	ferry__ring_dir_init(&r->rx, r->base, 1, m.slot_bytes, m.slots);
	ret = send_offer(fd, &m, fds);
	close(fds[0]); /* the mapping stays; the eventfds are the ring's */
	fds[0] = -1;
	if (ret < 0)
		goto err;
	*out = r;
	return 0;
err:
	if (fds[0] >= 0)
		close(fds[0]);
	ferry__rt_fdring_destroy(r);
	FLOG_WARN(COMP, "no ring beside a blocking socket: %s", ferry_strerror(ret));
	return ret;
}

int ferry__rt_fdring_setup_reply(struct ferry__rt_fdring **rp, const void *payload, size_t len)
{
	struct ferry__rt_fdring *r = *rp;
	int status = ferry__rt_ring_reply_status(payload, r && !r->ready, "a graph's socket");

	(void)len;
	if (!r || r->ready)
		return -EPROTO;
	if (status < 0) {
		ferry__rt_fdring_destroy(r);
		*rp = NULL;
		return status;
	}
	r->ready = true;
	return 0;
}

int ferry__rt_fdring_put(struct ferry__rt_fdring *r, uint16_t type, const void *payload, size_t len)
{
	int ret;

	if (!r || !r->ready || r->tx_broken ||
	    atomic_load_explicit(&r->tx.ctl->sock_seen, memory_order_acquire) != r->sock_sent)
		return 1;
	ret = ferry__ring_put(&r->tx, type, payload, len);
	if (ret == -EPROTO) {
		FLOG_WARN(COMP, "the worker's ring tail is out of bounds: ring dropped");
		r->tx_broken = true;
		return -EPROTO;
	}
	if (ret < 0)
		return 1; /* -EMSGSIZE, -EAGAIN: the socket takes it */
	ret = ferry__ring_wake(&r->tx, &r->woken, r->peer_wake_fd);
	if (ret < 0)
		FLOG_WARN(COMP, "wake write: %s", ferry_strerror(ret));
	ferry__rt_ring_count(true);
	return 0;
}

void ferry__rt_fdring_sent(struct ferry__rt_fdring *r)
{
	if (!r)
		return;
	r->sock_sent++; /* counted from the offer on: the worker counts from RingSetup on */
	ferry__rt_ring_count(false);
}

/* Messages only the socket carries (as ring_conn.c). */
static bool socket_only(uint16_t type)
{
	return type == FERRY__WIRE_MSG_RING_SETUP || type == FERRY__WIRE_MSG_RING_SETUP_REPLY ||
	       type == FERRY__WIRE_MSG_RUNTIME_CONNECT ||
	       type == FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY;
}

int ferry__rt_fdring_drain(struct ferry__rt_fdring *r, ferry__rt_fdring_deliver_fn deliver,
			   void *arg)
{
	uint16_t type;
	size_t len;
	int n = 0, ret;

	if (!r || !r->ready || r->rx_broken)
		return 0;
	while (n < (int)r->rx.nslots) {
		ret = ferry__ring_get(&r->rx, r->buf, &type, &len);
		if (ret == 0)
			break;
		if (ret < 0 || socket_only(type) || ferry__wire_verify(type, r->buf, len) < 0) {
			FLOG_WARN(COMP, "%s: ring dropped",
				  ret < 0 ? "the worker's ring head or a slot's length is out of "
					    "bounds"
					  : "a malformed message in the worker's ring");
			r->rx_broken = true;
			return -EPROTO;
		}
		deliver(arg, type, r->buf, len);
		n++;
	}
	return n;
}

int ferry__rt_fdring_on_socket(struct ferry__rt_fdring *r, uint16_t type,
			       ferry__rt_fdring_deliver_fn deliver, void *arg)
{
	int ret;

	if (!r || !r->ready || socket_only(type))
		return 0;
	ret = ferry__rt_fdring_drain(r, deliver, arg);
	if (ret < 0)
		return ret;
	r->sock_seen++;
	atomic_store_explicit(&r->rx.ctl->sock_seen, r->sock_seen, memory_order_release);
	return 0;
}

bool ferry__rt_fdring_pending(const struct ferry__rt_fdring *r)
{
	return r && r->ready && !r->rx_broken && ferry__ring_pending(&r->rx);
}

int ferry__rt_fdring_sleep(struct ferry__rt_fdring *r, bool asleep)
{
	if (!r || !r->ready || r->rx_broken)
		return -1;
	if (asleep && ++r->sleeps == 0)
		r->sleeps = 1;
	atomic_store(&r->rx.ctl->sleeping, asleep ? r->sleeps : 0u);
	/* Then look once more (DESIGN: Wait): the worker orders its put and load the same. */
	atomic_thread_fence(memory_order_seq_cst);
	return r->wake_fd;
}

void ferry__rt_fdring_woken(struct ferry__rt_fdring *r)
{
	uint64_t v;

	if (r && r->wake_fd >= 0 && read(r->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		FLOG_WARN(COMP, "wake read: %s", ferry_strerror(-errno));
}
