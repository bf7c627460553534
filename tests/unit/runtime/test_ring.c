/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The same-host rings (runtime/ring.h). The ring alone: messages in order across wrap-around,
 * a full ring, a message larger than a slot, geometries a receiver refuses, and garbage heads,
 * tails and lengths (never read past a slot). Two processes over a memfd. Then a ring pair
 * beside a socketpair on a loop, as an owner and a worker use it: messages both ways in order
 * whether each took the ring or the socket (larger than a slot), with the loop spinning and
 * with it always asleep (eventfd wake-ups); and an owner facing a "worker" that writes garbage
 * into the rings: its socket closes, nothing is read out of bounds. Last, the owner's side
 * beside a blocking socket (ring_fd.c, a compiled graph's driver) against a worker played by
 * hand: the order rules, the wake-ups, a refusal and garbage.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"
#include "ftest_loop.h"
#include "runtime/ring.h"

#define SLOT 128u
#define NSLOTS 8u

/* A zeroed mapping of the small test geometry and both ends of its direction @dir: the
 * producer @tx and the consumer @rx. Unmap with ferry__ring_bytes(SLOT, NSLOTS). */
static void *one_direction(unsigned dir, struct ferry__ring_dir *tx, struct ferry__ring_dir *rx)
{
	size_t bytes = (size_t)ferry__ring_bytes(SLOT, NSLOTS);
	void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ftest_assert_true(base != MAP_FAILED);
	ferry__ring_dir_init(tx, base, dir, SLOT, NSLOTS);
	ferry__ring_dir_init(rx, base, dir, SLOT, NSLOTS);
	return base;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seed * 31 + i);
}

FTEST(messages_come_out_in_order_across_wrap_around)
{
	struct ferry__ring_dir tx, rx;
	void *base = one_direction(1, &tx, &rx);
	uint8_t msg[SLOT], got[SLOT];
	uint16_t type;
	size_t len;

	for (unsigned round = 0; round < 10; round++) {
		for (unsigned i = 0; i < 5; i++) {
			fill(msg, i * 20, round + i);
			ftest_assert_ok(ferry__ring_put(&tx, (uint16_t)(100 + i), msg, i * 20));
		}
		ftest_assert_true(ferry__ring_pending(&rx));
		for (unsigned i = 0; i < 5; i++) {
			ftest_assert_int_eq(ferry__ring_get(&rx, got, &type, &len), 1);
			ftest_assert_uint_eq(type, 100 + i);
			ftest_assert_uint_eq(len, i * 20);
			fill(msg, i * 20, round + i);
			ftest_assert_mem_eq(got, msg, len);
		}
		ftest_assert_int_eq(ferry__ring_get(&rx, got, &type, &len), 0);
	}
	munmap(base, ferry__ring_bytes(SLOT, NSLOTS));
}

FTEST(a_full_ring_is_eagain_and_a_large_message_emsgsize)
{
	struct ferry__ring_dir tx, rx;
	void *base = one_direction(0, &tx, &rx);
	uint8_t msg[SLOT] = {0}, got[SLOT];
	uint16_t type;
	size_t len;

	ftest_assert_errno(ferry__ring_put(&tx, 1, msg, SLOT - FERRY__RING_SLOT_HEADER + 1),
			   -EMSGSIZE);
	ftest_assert_ok(ferry__ring_put(&tx, 1, msg, SLOT - FERRY__RING_SLOT_HEADER));
	for (unsigned i = 1; i < NSLOTS; i++)
		ftest_assert_ok(ferry__ring_put(&tx, 1, msg, 1));
	ftest_assert_errno(ferry__ring_put(&tx, 1, msg, 1), -EAGAIN);
	ftest_assert_int_eq(ferry__ring_get(&rx, got, &type, &len), 1);
	ftest_assert_uint_eq(len, SLOT - FERRY__RING_SLOT_HEADER);
	ftest_assert_ok(ferry__ring_put(&tx, 1, msg, 1)); /* one slot came back */
	munmap(base, ferry__ring_bytes(SLOT, NSLOTS));
}

FTEST(geometries_out_of_bounds_are_refused)
{
	ftest_assert_ok(ferry__ring_check(SLOT, NSLOTS, ferry__ring_bytes(SLOT, NSLOTS)));
	ftest_assert_ok(
		ferry__ring_check(FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS,
				  ferry__ring_bytes(FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS)));
	ftest_assert_errno(ferry__ring_check(SLOT, NSLOTS, ferry__ring_bytes(SLOT, NSLOTS) - 1),
			   -EINVAL);
	ftest_assert_errno(ferry__ring_check(SLOT, 6, ferry__ring_bytes(SLOT, 6)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(SLOT, 1, ferry__ring_bytes(SLOT, 1)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(SLOT, 0, ferry__ring_bytes(SLOT, 0)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(100, NSLOTS, ferry__ring_bytes(100, NSLOTS)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(64, NSLOTS, ferry__ring_bytes(64, NSLOTS)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(1u << 20, 8, ferry__ring_bytes(1u << 20, 8)), -EINVAL);
	ftest_assert_errno(ferry__ring_check(65536, 4096, ferry__ring_bytes(65536, 4096)),
			   -EINVAL); /* 512 MiB: over the cap */
	ftest_assert_errno(ferry__ring_check(UINT32_MAX & ~63u, 2, UINT64_MAX), -EINVAL);
}

FTEST(garbage_indexes_and_lengths_are_eproto)
{
	struct ferry__ring_dir tx, rx;
	void *base = one_direction(0, &tx, &rx);
	uint8_t msg[SLOT] = {0}, got[SLOT];
	uint16_t type;
	size_t len;

	/* A head more than a ring ahead, or behind the reader. */
	atomic_store(&rx.ctl->head, NSLOTS + 1);
	ftest_assert_errno(ferry__ring_get(&rx, got, &type, &len), -EPROTO);
	atomic_store(&rx.ctl->head, UINT32_MAX);
	ftest_assert_errno(ferry__ring_get(&rx, got, &type, &len), -EPROTO);
	/* A slot's length past the slot. */
	atomic_store(&rx.ctl->head, 0);
	ftest_assert_ok(ferry__ring_put(&tx, 7, msg, 10));
	memset(rx.slots, 0xff, 4);
	ftest_assert_errno(ferry__ring_get(&rx, got, &type, &len), -EPROTO);
	*(uint32_t *)(void *)rx.slots = SLOT - FERRY__RING_SLOT_HEADER + 1;
	ftest_assert_errno(ferry__ring_get(&rx, got, &type, &len), -EPROTO);
	/* The producer: a tail ahead of its head, or more than a ring behind. */
	atomic_store(&tx.ctl->tail, 5);
	ftest_assert_errno(ferry__ring_put(&tx, 7, msg, 1), -EPROTO);
	atomic_store(&tx.ctl->tail, tx.pos - NSLOTS - 1);
	ftest_assert_errno(ferry__ring_put(&tx, 7, msg, 1), -EPROTO);
	munmap(base, ferry__ring_bytes(SLOT, NSLOTS));
}

/* A child echoes N messages back through the other direction of a memfd's rings. */
FTEST(two_processes_over_a_memfd)
{
	const unsigned n = 20000;
	size_t bytes = (size_t)ferry__ring_bytes(SLOT, NSLOTS);
	int fd = memfd_create("test-ring", MFD_CLOEXEC);
	struct ferry__ring_dir tx, rx;
	uint8_t msg[SLOT], got[SLOT];
	unsigned sent = 0, recvd = 0;
	uint16_t type;
	size_t len;
	void *base;
	pid_t pid;
	int status;

	ftest_assert_int_ge(fd, 0);
	ftest_assert_ok(ftruncate(fd, (off_t)bytes));
	base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ftest_assert_true(base != MAP_FAILED);
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct ferry__ring_dir ctx, crx;
		unsigned echoed = 0;

		ferry__ring_dir_init(&crx, base, 0, SLOT, NSLOTS);
		ferry__ring_dir_init(&ctx, base, 1, SLOT, NSLOTS);
		while (echoed < n) {
			int r = ferry__ring_get(&crx, got, &type, &len);

			if (r < 0)
				_exit(2);
			if (r == 0) {
				sched_yield();
				continue;
			}
			while ((r = ferry__ring_put(&ctx, type, got, len)) == -EAGAIN)
				sched_yield();
			if (r < 0)
				_exit(3);
			echoed++;
		}
		_exit(0);
	}
	ferry__ring_dir_init(&tx, base, 0, SLOT, NSLOTS);
	ferry__ring_dir_init(&rx, base, 1, SLOT, NSLOTS);
	while (recvd < n) {
		int r;

		if (sent < n) {
			fill(msg, sent % 100, sent);
			r = ferry__ring_put(&tx, (uint16_t)sent, msg, sent % 100);
			if (r == 0)
				sent++;
			else
				ftest_assert_errno(r, -EAGAIN);
		}
		r = ferry__ring_get(&rx, got, &type, &len);
		ftest_assert_int_ge(r, 0);
		if (r == 0) {
			sched_yield();
			continue;
		}
		ftest_assert_uint_eq(type, (uint16_t)recvd);
		ftest_assert_uint_eq(len, recvd % 100);
		fill(msg, len, recvd);
		ftest_assert_mem_eq(got, msg, len);
		recvd++;
	}
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	munmap(base, bytes);
	close(fd);
}

/* ---- a ring pair beside a socketpair, on a loop ---- */

/* Test messages: ErrorReply with request_seq = the message's number, text of a chosen size. */
static int send_msg(struct ferry__rt_ring *r, struct ferry__conn *conn, uint64_t seq, size_t text)
{
	struct ferry__fb_builder b;
	struct ferry__wire_error_reply m = {.code = -1, .request_seq = seq};
	char *t = calloc(1, text + 1);
	int ret;

	ftest_assert_ptr_notnull(t);
	memset(t, 'a' + (int)(seq % 26), text);
	m.message = t;
	ferry__fb_builder_init(&b);
	ftest_assert_ok(ferry__wire_error_reply_build(&b, &m));
	ret = ferry__rt_ring_send(r, conn, FERRY__WIRE_MSG_ERROR_REPLY, ferry__fb_builder_data(&b),
				  ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	free(t);
	return ret;
}

#define ECHOES 200
#define WINDOW 4

/* Message i's text: small ones take the ring, every 7th is larger than a slot. */
static size_t text_of(uint64_t i)
{
	return i % 7 == 3 ? 3000 : i % 50;
}

struct side {
	struct ferry__loop *loop;
	struct ferry__conn *conn;    /* NULL once closed */
	struct ferry__rt_ring *ring; /* beside it */
	bool owner;		     /* offers the ring; else accepts it */
	bool evil;		     /* the worker maps the ring itself and writes garbage */
	uint64_t got;		     /* test messages received, in order */
	uint64_t next;		     /* owner: the next message to send */
	int bad;		     /* out of order or corrupt */
	int closes;		     /* on_close calls */
	int setup_status;	     /* RingSetupReply's status (owner), 1 before */
	int fds[3];		     /* evil: the RingSetup's fds */
	void *evil_base;	     /* evil: the owner's mapping */
	uint64_t evil_bytes;	     /* its size */
};

static void side_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct side *s = ferry__conn_data(conn);
	struct ferry__wire_error_reply_view v;

	if (!ferry__rt_ring_on_socket(s->ring, conn, type))
		return;
	if (type == FERRY__WIRE_MSG_RING_SETUP_REPLY) {
		s->setup_status = ferry__rt_ring_setup_reply(&s->ring, payload, len);
		return;
	}
	if (type == FERRY__WIRE_MSG_RING_SETUP && s->evil) {
		struct ferry__wire_ring_setup_view sv =
			ferry__wire_ring_setup_root_verified(payload);
		struct ferry__fb_builder b;
		struct ferry__wire_ring_setup_reply m = {0};

		for (int i = 0; i < 3; i++)
			s->fds[i] = ferry__conn_take_fd(conn);
		s->evil_bytes = ferry__wire_ring_setup_bytes(sv);
		s->evil_base =
			mmap(NULL, s->evil_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fds[0], 0);
		ftest_assert_true(s->evil_base != MAP_FAILED);
		ferry__fb_builder_init(&b);
		ftest_assert_ok(ferry__wire_ring_setup_reply_build(&b, &m));
		ftest_assert_ok(ferry__conn_send(conn, FERRY__WIRE_MSG_RING_SETUP_REPLY,
						 ferry__fb_builder_data(&b),
						 ferry__fb_builder_size(&b)));
		ferry__fb_builder_fini(&b);
		return;
	}
	if (type == FERRY__WIRE_MSG_RING_SETUP) {
		ftest_assert_ok(ferry__rt_ring_accept(s->loop, conn, payload, len, side_on_message,
						      &s->ring));
		return;
	}
	if (type != FERRY__WIRE_MSG_ERROR_REPLY || ferry__wire_error_reply_root(payload, len, &v) ||
	    ferry__wire_error_reply_request_seq(v) != s->got ||
	    ferry__wire_error_reply_message_len(v) != text_of(s->got)) {
		s->bad++;
		return;
	}
	s->got++;
	if (!s->owner) { /* the worker answers each */
		ftest_assert_ok(send_msg(s->ring, conn, ferry__wire_error_reply_request_seq(v),
					 text_of(ferry__wire_error_reply_request_seq(v))));
	} else if (s->next < ECHOES) { /* the owner keeps WINDOW in flight */
		ftest_assert_ok(send_msg(s->ring, conn, s->next, text_of(s->next)));
		s->next++;
	}
}

static void side_on_close(struct ferry__conn *conn, int err)
{
	struct side *s = ferry__conn_data(conn);

	(void)err;
	ferry__rt_ring_close(s->ring);
	s->ring = NULL;
	s->conn = NULL;
	s->closes++;
}

static const struct ferry__conn_callbacks side_cb = {
	.on_message = side_on_message,
	.on_close = side_on_close,
};

/* An owner and a worker on one loop (spinning @spin_us), a socketpair between them. */
static void pair_open(struct side *o, struct side *w, unsigned spin_us, bool evil)
{
	struct ferry__loop *loop = NULL;
	struct ferry__conn_opts oo = {.cb = &side_cb, .data = o, .max_message_bytes = 1 << 20};
	struct ferry__conn_opts wo = {.cb = &side_cb, .data = w, .max_message_bytes = 1 << 20};
	int sv[2];

	ftest_assert_ok(ferry__loop_create(&(struct ferry__loop_opts){.spin_us = spin_us}, &loop));
	ftest_assert_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	*o = (struct side){.loop = loop, .owner = true, .setup_status = 1, .fds = {-1, -1, -1}};
	*w = (struct side){.loop = loop, .evil = evil, .fds = {-1, -1, -1}};
	ftest_assert_ok(ferry__conn_open(loop, sv[0], &oo, &o->conn));
	ftest_assert_ok(ferry__conn_open(loop, sv[1], &wo, &w->conn));
	ftest_assert_ok(ferry__rt_ring_offer(loop, o->conn, side_on_message, &o->ring));
}

static bool set_up(void *arg)
{
	const struct side *o = arg;

	return o->setup_status != 1 || !o->conn;
}

struct pair {
	struct side o, w;
};

static bool pair_closed(void *arg)
{
	const struct pair *p = arg;

	return !p->o.conn && !p->w.conn;
}

static bool all_echoed(void *arg)
{
	const struct pair *p = arg;

	return p->o.got == ECHOES || p->o.bad || p->w.bad || !p->o.conn;
}

static void echo_run(unsigned spin_us)
{
	struct pair *p = calloc(1, sizeof(*p));
	uint64_t ring0, sock0, ring1, sock1;

	ftest_assert_ptr_notnull(p);
	pair_open(&p->o, &p->w, spin_us, false);
	run_until(p->o.loop, set_up, &p->o);
	ftest_assert_int_eq(p->o.setup_status, 0);
	ferry__rt_ring_counts(&ring0, &sock0);
	for (p->o.next = 0; p->o.next < WINDOW; p->o.next++)
		ftest_assert_ok(send_msg(p->o.ring, p->o.conn, p->o.next, text_of(p->o.next)));
	run_until(p->o.loop, all_echoed, p);
	ftest_assert_int_eq(p->o.bad, 0);
	ftest_assert_int_eq(p->w.bad, 0);
	ftest_assert_uint_eq(p->w.got, ECHOES);
	ftest_assert_uint_eq(p->o.got, ECHOES);
	ferry__rt_ring_counts(&ring1, &sock1);
	ftest_log("through the rings: %llu, on the socket: %llu",
		  (unsigned long long)(ring1 - ring0), (unsigned long long)(sock1 - sock0));
	ftest_assert_uint_ge(ring1 - ring0, 20);     /* the small ones, both ways */
	ftest_assert_uint_ge(sock1 - sock0, 2 * 28); /* the 29 large ones, both ways */
	ferry__conn_close(p->o.conn);
	run_until(p->o.loop, pair_closed, p);
	ferry__loop_destroy(p->o.loop);
	free(p);
}

FTEST(messages_keep_their_order_across_ring_and_socket_spinning)
{
	echo_run(200);
}

FTEST(messages_keep_their_order_across_ring_and_socket_asleep)
{
	echo_run(0); /* the loop never polls: every ring message is an eventfd wake-up */
}

/* The "worker" maps the owner's ring itself and writes @what into it. */
enum garbage { HEAD_AHEAD, LENGTH_PAST_SLOT, MALFORMED_PAYLOAD, TAIL_AHEAD };

static void garbage_run(enum garbage what)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ferry__ring_dir to_owner, to_worker;
	uint64_t one = 1;

	ftest_assert_ptr_notnull(p);
	pair_open(&p->o, &p->w, 0, true);
	run_until(p->o.loop, set_up, &p->o);
	ftest_assert_int_eq(p->o.setup_status, 0);
	ferry__ring_dir_init(&to_worker, p->w.evil_base, 0, FERRY__RING_SLOT_BYTES,
			     FERRY__RING_SLOTS);
	ferry__ring_dir_init(&to_owner, p->w.evil_base, 1, FERRY__RING_SLOT_BYTES,
			     FERRY__RING_SLOTS);
	switch (what) {
	case HEAD_AHEAD:
		atomic_store(&to_owner.ctl->head, FERRY__RING_SLOTS + 5);
		break;
	case LENGTH_PAST_SLOT:
		*(uint32_t *)(void *)to_owner.slots = 0x7fffffff;
		atomic_store(&to_owner.ctl->head, 1);
		break;
	case MALFORMED_PAYLOAD:
		memset(to_owner.slots, 0xa5, 64);
		*(uint32_t *)(void *)to_owner.slots = 56;
		*(uint16_t *)(void *)(to_owner.slots + 4) = FERRY__WIRE_MSG_PUSH_TASK_REPLY;
		atomic_store(&to_owner.ctl->head, 1);
		break;
	case TAIL_AHEAD:
		atomic_store(&to_worker.ctl->tail, 12345);
		break;
	}
	if (what == TAIL_AHEAD) /* the owner's next send finds it */
		ftest_assert_errno(send_msg(p->o.ring, p->o.conn, 0, 1), -ENOTCONN);
	else /* wake the owner: its loop sleeps (spin 0) */
		ftest_assert_int_eq(write(p->w.fds[2], &one, sizeof(one)), (ssize_t)sizeof(one));
	run_until(p->o.loop, pair_closed, p);
	ftest_assert_int_eq(p->o.closes, 1);
	ftest_assert_uint_eq(p->o.got, 0);
	munmap(p->w.evil_base, p->w.evil_bytes);
	for (int i = 0; i < 3; i++)
		close(p->w.fds[i]);
	ferry__loop_destroy(p->o.loop);
	free(p);
}

FTEST(a_head_out_of_bounds_closes_the_socket)
{
	garbage_run(HEAD_AHEAD);
}

FTEST(a_length_past_the_slot_closes_the_socket)
{
	garbage_run(LENGTH_PAST_SLOT);
}

FTEST(a_malformed_payload_closes_the_socket)
{
	garbage_run(MALFORMED_PAYLOAD);
}

FTEST(a_tail_out_of_bounds_closes_the_socket)
{
	garbage_run(TAIL_AHEAD);
}

/* ---- a ring pair beside a blocking socket (ring_fd.c), the worker played by hand ---- */

struct fdpair {
	int sv[2];			  /* owner's end (blocking), worker's end */
	struct ferry__rt_fdring *r;	  /* the owner's ring pair */
	int fds[3];			  /* RingSetup's: memfd, the worker's wake, the owner's */
	void *base;			  /* the worker's mapping of it */
	size_t bytes;			  /* its size */
	struct ferry__ring_dir to_worker; /* the worker's view of direction 0 */
	struct ferry__ring_dir to_owner;  /* and of direction 1 */
};

/* The owner offers; the "worker" reads RingSetup and its fds off the socket and maps them. */
static void fdpair_open(struct fdpair *p)
{
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	uint8_t frame[512];
	struct iovec iov = {.iov_base = frame, .iov_len = sizeof(frame)};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = cbuf.buf,
			   .msg_controllen = sizeof(cbuf.buf)};
	struct ferry__frame_header h;
	struct cmsghdr *cm;

	ftest_assert_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->sv));
	ftest_assert_ok(ferry__rt_fdring_offer(p->sv[0], &p->r));
	ftest_assert_int_ge(recvmsg(p->sv[1], &m, 0), FERRY_FRAME_HEADER_SIZE);
	ftest_assert_ok(ferry__frame_header_decode(frame, 1 << 20, &h));
	ftest_assert_uint_eq(h.type, FERRY__WIRE_MSG_RING_SETUP);
	cm = CMSG_FIRSTHDR(&m);
	ftest_assert_ptr_notnull(cm);
	ftest_assert_uint_eq(cm->cmsg_len, CMSG_LEN(3 * sizeof(int)));
	memcpy(p->fds, CMSG_DATA(cm), sizeof(p->fds));
	p->bytes = (size_t)ferry__ring_bytes(FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS);
	p->base = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fds[0], 0);
	ftest_assert_true(p->base != MAP_FAILED);
	ferry__ring_dir_init(&p->to_worker, p->base, 0, FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS);
	ferry__ring_dir_init(&p->to_owner, p->base, 1, FERRY__RING_SLOT_BYTES, FERRY__RING_SLOTS);
}

/* The worker's RingSetupReply of @status, as the owner's reader hands it over. */
static int fdpair_reply(struct fdpair *p, int status)
{
	struct ferry__wire_ring_setup_reply m = {.status = status};
	struct ferry__fb_builder b;
	int ret;

	ferry__fb_builder_init(&b);
	ftest_assert_ok(ferry__wire_ring_setup_reply_build(&b, &m));
	ret = ferry__rt_fdring_setup_reply(&p->r, ferry__fb_builder_data(&b),
					   ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	return ret;
}

static void fdpair_close(struct fdpair *p)
{
	ferry__rt_fdring_destroy(p->r);
	munmap(p->base, p->bytes);
	for (int i = 0; i < 3; i++)
		close(p->fds[i]);
	close(p->sv[0]);
	close(p->sv[1]);
}

/* A test message (ErrorReply numbered @seq) into @b. */
static void numbered(struct ferry__fb_builder *b, uint64_t seq)
{
	struct ferry__wire_error_reply m = {.code = -1, .request_seq = seq, .message = "x"};

	ferry__fb_builder_init(b);
	ftest_assert_ok(ferry__wire_error_reply_build(b, &m));
}

/* What the owner's reader took: messages numbered 0, 1, ... */
struct took {
	uint64_t n; /* taken */
	int bad;    /* not the next number, or not verified */
};

static void take(void *arg, uint16_t type, const void *payload, size_t len)
{
	struct took *t = arg;
	struct ferry__wire_error_reply_view v;

	if (type != FERRY__WIRE_MSG_ERROR_REPLY || ferry__wire_error_reply_root(payload, len, &v) ||
	    ferry__wire_error_reply_request_seq(v) != t->n)
		t->bad++;
	t->n++;
}

static void worker_put(struct fdpair *p, uint64_t seq)
{
	struct ferry__fb_builder b;

	numbered(&b, seq);
	ftest_assert_ok(ferry__ring_put(&p->to_owner, FERRY__WIRE_MSG_ERROR_REPLY,
					ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)));
	ferry__fb_builder_fini(&b);
}

FTEST(a_blocking_socket_ring_keeps_order_with_its_socket_and_wakes_sleepers)
{
	struct fdpair p;
	struct ferry__fb_builder b;
	struct took t = {0};
	uint8_t got[FERRY__RING_SLOT_BYTES];
	struct pollfd pfd;
	uint64_t v;
	uint16_t type;
	size_t len;
	int fd;

	fdpair_open(&p);
	numbered(&b, 0);
	/* Before the worker's reply: the socket (counted: the worker counts from RingSetup). */
	ftest_assert_int_eq(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY,
						 ferry__fb_builder_data(&b),
						 ferry__fb_builder_size(&b)),
			    1);
	ferry__rt_fdring_sent(p.r);
	ftest_assert_ok(fdpair_reply(&p, 0));
	/* The worker has not taken that socket message yet: this one follows it there. */
	ftest_assert_int_eq(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY,
						 ferry__fb_builder_data(&b),
						 ferry__fb_builder_size(&b)),
			    1);
	ferry__rt_fdring_sent(p.r);
	atomic_store(&p.to_worker.ctl->sock_seen, 2);
	/* Taken: the ring, and the worker's eventfd once per sleep. */
	atomic_store(&p.to_worker.ctl->sleeping, 7);
	for (int i = 0; i < 2; i++)
		ftest_assert_int_eq(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY,
							 ferry__fb_builder_data(&b),
							 ferry__fb_builder_size(&b)),
				    0);
	ftest_assert_int_eq(read(p.fds[1], &v, sizeof(v)), (ssize_t)sizeof(v));
	ftest_assert_int_eq(read(p.fds[1], &v, sizeof(v)), -1); /* one wake-up for the two */
	for (int i = 0; i < 2; i++) {
		ftest_assert_int_eq(ferry__ring_get(&p.to_worker, got, &type, &len), 1);
		ftest_assert_uint_eq(type, FERRY__WIRE_MSG_ERROR_REPLY);
		ftest_assert_uint_eq(len, ferry__fb_builder_size(&b));
	}
	ferry__fb_builder_fini(&b);
	/* The reader: ring messages before the socket's, the socket's counted for the worker. */
	ftest_assert_false(ferry__rt_fdring_pending(p.r));
	worker_put(&p, 0);
	worker_put(&p, 1);
	ftest_assert_true(ferry__rt_fdring_pending(p.r));
	ftest_assert_ok(ferry__rt_fdring_on_socket(p.r, FERRY__WIRE_MSG_ERROR_REPLY, take, &t));
	ftest_assert_uint_eq(t.n, 2);
	t.n++; /* the socket's message, number 2 */
	ftest_assert_uint_eq(atomic_load(&p.to_owner.ctl->sock_seen), 1);
	/* Asleep: the worker's put finds the word and writes the owner's eventfd. */
	fd = ferry__rt_fdring_sleep(p.r, true);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_uint_ne(atomic_load(&p.to_owner.ctl->sleeping), 0);
	worker_put(&p, 3);
	ftest_assert_ok(ferry__ring_wake(&p.to_owner, &(uint32_t){0}, p.fds[2]));
	pfd = (struct pollfd){.fd = fd, .events = POLLIN};
	ftest_assert_int_eq(poll(&pfd, 1, 5000), 1);
	ferry__rt_fdring_woken(p.r);
	ftest_assert_int_eq(ferry__rt_fdring_sleep(p.r, false), fd);
	ftest_assert_uint_eq(atomic_load(&p.to_owner.ctl->sleeping), 0);
	ftest_assert_int_eq(ferry__rt_fdring_drain(p.r, take, &t), 1);
	ftest_assert_uint_eq(t.n, 4);
	ftest_assert_int_eq(t.bad, 0);
	fdpair_close(&p);
}

FTEST(a_blocking_socket_ring_refused_or_fed_garbage_is_dropped)
{
	struct fdpair p;
	struct took t = {0};
	uint8_t small[8] = {0};

	/* Refused: the ring goes, everything takes the socket. */
	fdpair_open(&p);
	ftest_assert_errno(fdpair_reply(&p, -ENOMEM), -ENOMEM);
	ftest_assert_ptr_null(p.r);
	ftest_assert_int_eq(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY, small, 8), 1);
	fdpair_close(&p);
	/* A head out of bounds, a length past the slot, a payload that does not verify. */
	for (int what = 0; what < 3; what++) {
		fdpair_open(&p);
		ftest_assert_ok(fdpair_reply(&p, 0));
		if (what == 0) {
			atomic_store(&p.to_owner.ctl->head, FERRY__RING_SLOTS + 5);
		} else {
			memset(p.to_owner.slots, 0xa5, 64);
			*(uint32_t *)(void *)p.to_owner.slots = what == 1 ? 0x7fffffff : 56;
			*(uint16_t *)(void *)(p.to_owner.slots + 4) = FERRY__WIRE_MSG_ERROR_REPLY;
			atomic_store(&p.to_owner.ctl->head, 1);
		}
		ftest_assert_errno(ferry__rt_fdring_drain(p.r, take, &t), -EPROTO);
		ftest_assert_false(ferry__rt_fdring_pending(p.r)); /* never read again */
		ftest_assert_int_eq(ferry__rt_fdring_sleep(p.r, true), -1);
		ftest_assert_uint_eq(t.n, 0);
		fdpair_close(&p);
	}
	/* A tail out of bounds: the sender drops the ring, later sends take the socket. */
	fdpair_open(&p);
	ftest_assert_ok(fdpair_reply(&p, 0));
	atomic_store(&p.to_worker.ctl->tail, 12345);
	ftest_assert_errno(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY, small, 8),
			   -EPROTO);
	ftest_assert_int_eq(ferry__rt_fdring_put(p.r, FERRY__WIRE_MSG_ERROR_REPLY, small, 8), 1);
	fdpair_close(&p);
}
