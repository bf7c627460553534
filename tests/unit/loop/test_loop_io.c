/* SPDX-License-Identifier: Apache-2.0 */
/* Loop requests over real sockets: accept/connect/send/recv on loopback TCP and socketpairs,
 * zero-copy sends, SCM_RIGHTS, poll, cancel, connect errors and timeouts, fault injection, and
 * destroy with everything in flight. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include "common/alloc.h"
#include "common/loop.h"
#include "common/util.h"
#include "ftest.h"

/* What a request's callbacks saw. */
struct seen {
	struct ferry__loop_req req; /* the request */
	struct ferry__loop *loop;   /* to stop */
	int calls;		    /* callbacks of every kind */
	int finals;		    /* final callbacks */
	int sent;		    /* send_zc: sent-stage callbacks */
	int sent_result;	    /* send_zc: the sent-stage result */
	int result;		    /* the final result */
	int results[16];	    /* multishot: intermediate results */
	int nresults;		    /* entries in results */
	int *outstanding;	    /* decremented at the final callback; stops the loop at 0 */
};

static struct ferry__loop *new_loop(void)
{
	struct ferry__loop *loop = NULL;

	ftest_assert_ok(ferry__loop_create(NULL, &loop));
	return loop;
}

static void seen_init(struct seen *s, struct ferry__loop *loop, int *outstanding)
{
	memset(s, 0, sizeof(*s));
	s->loop = loop;
	s->outstanding = outstanding;
	s->result = 1; /* no request returns 1 for the tests' operations before they complete */
}

static void on_seen(struct ferry__loop_req *req, int result)
{
	struct seen *s = FERRY_CONTAINER_OF(req, struct seen, req);

	s->calls++;
	if (ferry__loop_req_pending(req)) {
		ftest_assert_int_lt(s->nresults, 16);
		s->results[s->nresults++] = result;
		return;
	}
	s->finals++;
	s->result = result;
	if (s->outstanding && --*s->outstanding == 0)
		ferry__loop_stop(s->loop);
}

static void on_sent(struct ferry__loop_req *req, int result)
{
	struct seen *s = FERRY_CONTAINER_OF(req, struct seen, req);

	ftest_assert_true(ferry__loop_req_pending(req));
	s->sent++;
	s->sent_result = result;
}

struct until {
	struct ferry__loop_timer timer; /* polls the condition every ms */
	bool (*cond)(void *arg);	/* done? */
	void *arg;			/* its argument */
};

static void on_until(struct ferry__loop_timer *t, int status)
{
	struct until *u = FERRY_CONTAINER_OF(t, struct until, timer);

	ftest_assert_int_eq(status, 0);
	if (u->cond(u->arg)) {
		ftest_assert_ok(ferry__loop_timer_stop(t));
		ferry__loop_stop(t->loop);
	}
}

/* Run @loop until @cond holds (checked every millisecond; no deadline: the harness has one). */
static void run_until(struct ferry__loop *loop, bool (*cond)(void *arg), void *arg)
{
	struct until u = {.cond = cond, .arg = arg};

	ftest_assert_ok(ferry__loop_timer_start(loop, &u.timer, 0, 1, on_until));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_false(ferry__loop_timer_active(&u.timer));
}

static int tcp_listener(int backlog, struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ftest_assert_int_ge(fd, 0);
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_eq(bind(fd, (struct sockaddr *)addr, sizeof(*addr)), 0);
	ftest_assert_int_eq(listen(fd, backlog), 0);
	ftest_assert_int_eq(getsockname(fd, (struct sockaddr *)addr, &len), 0);
	return fd;
}

static int tcp_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ftest_assert_int_ge(fd, 0);
	return fd;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 31 + seed + (i >> 12));
}

FTEST(socketpair_send_recv)
{
	struct ferry__loop *loop = new_loop();
	struct seen tx, rx;
	char out[] = "hello, ring", in[64] = {0};
	int sv[2], outstanding = 2;

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	seen_init(&tx, loop, &outstanding);
	seen_init(&rx, loop, &outstanding);
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[1], in, sizeof(in), 0, on_seen));
	ftest_assert_errno(ferry__loop_recv(loop, &rx.req, sv[1], in, sizeof(in), 0, on_seen),
			   -EBUSY);
	ftest_assert_ok(ferry__loop_send(loop, &tx.req, sv[0], out, sizeof(out), 0, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(tx.result, sizeof(out));
	ftest_assert_int_eq(rx.result, sizeof(out));
	ftest_assert_int_eq(tx.calls + rx.calls, 2);
	ftest_assert_str_eq(in, out);
	ferry__loop_destroy(loop);
	close(sv[0]);
	close(sv[1]);
}

FTEST(bad_arguments_are_refused_without_callback)
{
	struct ferry__loop *loop = new_loop();
	struct seen s;
	char buf[8];

	seen_init(&s, loop, NULL);
	ftest_assert_errno(ferry__loop_recv(loop, &s.req, -1, buf, sizeof(buf), 0, on_seen),
			   -EBADF);
	ftest_assert_errno(ferry__loop_recv(loop, &s.req, 0, buf, sizeof(buf), 0, NULL), -EINVAL);
	ftest_assert_errno(
		ferry__loop_send(loop, &s.req, 0, buf, (size_t)UINT32_MAX + 1, 0, on_seen),
		-EINVAL);
	ftest_assert_errno(ferry__loop_cancel(&s.req), -ENOENT);
	ftest_assert_errno(ferry__loop_inject(loop, &(struct ferry__loop_fault){.op = 99}),
			   -EINVAL);
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(s.calls, 0);
}

static bool three_accepted(void *arg)
{
	return ((struct seen *)arg)->nresults == 3;
}

/* Multishot accept delivers every connection; a cancel ends it with -ECANCELED. */
FTEST(tcp_accept_multishot_connect_and_cancel)
{
	struct ferry__loop *loop = new_loop();
	struct seen acc, con[3];
	struct sockaddr_in addr;
	int lfd = tcp_listener(16, &addr), cfd[3], outstanding = 3;

	seen_init(&acc, loop, NULL);
	ftest_assert_ok(ferry__loop_accept(loop, &acc.req, lfd, on_seen));
	for (int i = 0; i < 3; i++) {
		cfd[i] = tcp_socket();
		seen_init(&con[i], loop, &outstanding);
		ftest_assert_ok(ferry__loop_connect(loop, &con[i].req, cfd[i],
						    (struct sockaddr *)&addr, sizeof(addr),
						    i == 0 ? 0 : 5000, on_seen));
	}
	ftest_assert_ok(ferry__loop_run(loop));
	for (int i = 0; i < 3; i++)
		ftest_assert_int_eq(con[i].result, 0);
	/* Connects completing does not mean the accepts were all delivered yet. */
	run_until(loop, three_accepted, &acc);
	ftest_assert_true(ferry__loop_req_pending(&acc.req));
	for (int i = 0; i < 3; i++)
		ftest_assert_int_ge(acc.results[i], 0);
	outstanding = 1;
	acc.outstanding = &outstanding;
	ftest_assert_ok(ferry__loop_cancel(&acc.req));
	ftest_assert_errno(ferry__loop_cancel(&acc.req), -EALREADY);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(acc.result, -ECANCELED);
	ftest_assert_int_eq(acc.finals, 1);
	ferry__loop_destroy(loop);
	for (int i = 0; i < 3; i++) {
		close(acc.results[i]);
		close(cfd[i]);
	}
	close(lfd);
}

FTEST(connect_to_closed_port_is_refused)
{
	struct ferry__loop *loop = new_loop();
	struct sockaddr_in addr;
	int lfd = tcp_listener(1, &addr), fd = tcp_socket(), outstanding = 1;
	struct seen con;

	close(lfd); /* nothing listens on addr any more */
	seen_init(&con, loop, &outstanding);
	ftest_assert_ok(ferry__loop_connect(loop, &con.req, fd, (struct sockaddr *)&addr,
					    sizeof(addr), 2000, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(con.result, -ECONNREFUSED);
	ferry__loop_destroy(loop);
	close(fd);
}

/*
 * A listener with backlog 0 completes one handshake and then drops SYNs, so a second connect
 * hangs and the linked timeout fires. No time is asserted, only the error.
 */
FTEST(connect_timeout)
{
	struct ferry__loop *loop = new_loop();
	struct sockaddr_in addr;
	int lfd = tcp_listener(0, &addr), first = tcp_socket(), fd = tcp_socket(), outstanding = 1;
	struct seen con;

	ftest_assert_int_eq(connect(first, (struct sockaddr *)&addr, sizeof(addr)), 0);
	seen_init(&con, loop, &outstanding);
	ftest_assert_ok(ferry__loop_connect(loop, &con.req, fd, (struct sockaddr *)&addr,
					    sizeof(addr), 50, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(con.result, -ETIMEDOUT);
	ftest_assert_int_eq(con.calls, 1);
	ftest_assert_uint_eq(ferry__loop_inflight(loop), 1); /* only the wake read is left */
	ferry__loop_destroy(loop);
	close(fd);
	close(first);
	close(lfd);
}

/* Receives into one buffer until it is full, re-arming from its callback. */
struct sink {
	struct ferry__loop_req req; /* the pending recv */
	struct ferry__loop *loop;   /* to re-arm on */
	int fd;			    /* socket */
	uint8_t *buf;		    /* destination */
	size_t size;		    /* bytes wanted */
	size_t got;		    /* bytes received */
	struct seen *tx;	    /* the sender, for the stop condition */
};

static void on_sink(struct ferry__loop_req *req, int result)
{
	struct sink *k = FERRY_CONTAINER_OF(req, struct sink, req);

	ftest_assert_int_gt(result, 0);
	k->got += (size_t)result;
	if (k->got < k->size)
		ftest_assert_ok(ferry__loop_recv(k->loop, &k->req, k->fd, k->buf + k->got,
						 k->size - k->got, 0, on_sink));
}

static bool sink_full_and_sent(void *arg)
{
	struct sink *k = arg;

	return k->got == k->size && k->tx->finals == 1;
}

/* A large zero-copy send over loopback TCP: the sent stage comes first, then the final callback
 * after the notification; the receiver gets every byte intact. */
FTEST(send_zc_large_buffer_round_trip)
{
	enum { SIZE = 8 << 20 };
	struct ferry__loop *loop = new_loop();
	uint8_t *out = malloc(SIZE), *in = calloc(1, SIZE);
	struct sockaddr_in addr;
	int lfd = tcp_listener(4, &addr), cfd = tcp_socket(), sfd;
	struct seen tx;
	struct sink k;

	ftest_assert_ptr_notnull(out);
	ftest_assert_ptr_notnull(in);
	fill(out, SIZE, 7);
	ftest_assert_int_eq(connect(cfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ftest_assert_int_ge(sfd, 0);
	seen_init(&tx, loop, NULL);
	k = (struct sink){.loop = loop, .fd = sfd, .buf = in, .size = SIZE, .tx = &tx};
	ftest_assert_ok(
		ferry__loop_send_zc(loop, &tx.req, cfd, out, SIZE, MSG_WAITALL, on_sent, on_seen));
	ftest_assert_ok(ferry__loop_recv(loop, &k.req, sfd, in, SIZE, 0, on_sink));
	run_until(loop, sink_full_and_sent, &k);
	ftest_assert_int_eq(tx.sent, 1);
	ftest_assert_int_eq(tx.sent_result, SIZE);
	ftest_assert_int_eq(tx.result, SIZE);
	ftest_assert_mem_eq(in, out, SIZE);
	ferry__loop_destroy(loop);
	free(out);
	free(in);
	close(sfd);
	close(cfd);
	close(lfd);
}

FTEST(send_zc_on_unix_socket_is_unsupported)
{
	struct ferry__loop *loop = new_loop();
	int sv[2], outstanding = 1;
	struct seen tx;
	char byte = 1;

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	seen_init(&tx, loop, &outstanding);
	ftest_assert_ok(ferry__loop_send_zc(loop, &tx.req, sv[0], &byte, 1, 0, NULL, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(tx.result, -EOPNOTSUPP);
	ferry__loop_destroy(loop);
	close(sv[0]);
	close(sv[1]);
}

/* sendmsg/recvmsg with SCM_RIGHTS: the received fd refers to the same pipe. */
FTEST(sendmsg_recvmsg_pass_fd)
{
	struct ferry__loop *loop = new_loop();
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cout, cin;
	char payload = 'x', got = 0, via_pipe = 0;
	struct iovec iov_out = {&payload, 1}, iov_in = {&got, 1};
	struct msghdr mout = {0}, min = {0};
	int sv[2], pipefd[2], outstanding = 2, passed;
	struct cmsghdr *cm;
	struct seen tx, rx;

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	memset(&cout, 0, sizeof(cout));
	memset(&cin, 0, sizeof(cin));
	mout.msg_iov = &iov_out;
	mout.msg_iovlen = 1;
	mout.msg_control = cout.buf;
	mout.msg_controllen = sizeof(cout.buf);
	cm = CMSG_FIRSTHDR(&mout);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pipefd[0], sizeof(int));
	min.msg_iov = &iov_in;
	min.msg_iovlen = 1;
	min.msg_control = cin.buf;
	min.msg_controllen = sizeof(cin.buf);
	seen_init(&tx, loop, &outstanding);
	seen_init(&rx, loop, &outstanding);
	ftest_assert_ok(ferry__loop_recvmsg(loop, &rx.req, sv[1], &min, MSG_CMSG_CLOEXEC, on_seen));
	ftest_assert_ok(ferry__loop_sendmsg(loop, &tx.req, sv[0], &mout, 0, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(tx.result, 1);
	ftest_assert_int_eq(rx.result, 1);
	ftest_assert_int_eq(got, 'x');
	cm = CMSG_FIRSTHDR(&min);
	ftest_assert_ptr_notnull(cm);
	ftest_assert_int_eq(cm->cmsg_type, SCM_RIGHTS);
	memcpy(&passed, CMSG_DATA(cm), sizeof(int));
	ftest_assert_int_ne(passed, pipefd[0]);
	ftest_assert_int_eq(write(pipefd[1], "p", 1), 1);
	ftest_assert_int_eq(read(passed, &via_pipe, 1), 1);
	ftest_assert_int_eq(via_pipe, 'p');
	ferry__loop_destroy(loop);
	close(passed);
	close(pipefd[0]);
	close(pipefd[1]);
	close(sv[0]);
	close(sv[1]);
}

/* Multishot poll on an arbitrary fd (an eventfd standing in for an RDMA completion channel). */
struct poller {
	struct seen s; /* the poll request */
	int efd;       /* the eventfd */
	int wakeups;   /* readiness callbacks */
};

static void on_poll(struct ferry__loop_req *req, int result)
{
	struct poller *p = FERRY_CONTAINER_OF(req, struct poller, s.req);
	uint64_t value;

	if (!ferry__loop_req_pending(req)) {
		on_seen(req, result);
		return;
	}
	ftest_assert_true(result & POLLIN);
	ftest_assert_int_eq(read(p->efd, &value, sizeof(value)), sizeof(value));
	if (++p->wakeups < 3) {
		value = 1;
		ftest_assert_int_eq(write(p->efd, &value, sizeof(value)), sizeof(value));
	} else {
		ftest_assert_ok(ferry__loop_cancel(req));
	}
}

FTEST(poll_multishot_and_cancel)
{
	struct ferry__loop *loop = new_loop();
	struct poller p;
	uint64_t one = 1;
	int outstanding = 1;

	seen_init(&p.s, loop, &outstanding);
	p.wakeups = 0;
	p.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ftest_assert_int_ge(p.efd, 0);
	ftest_assert_ok(ferry__loop_poll(loop, &p.s.req, p.efd, POLLIN, true, on_poll));
	ftest_assert_int_eq(write(p.efd, &one, sizeof(one)), sizeof(one));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(p.wakeups, 3);
	ftest_assert_errno(p.s.result, -ECANCELED);
	ftest_assert_int_eq(p.s.finals, 1);
	ferry__loop_destroy(loop);
	close(p.efd);
}

FTEST(cancel_pending_recv_and_raw_nop)
{
	struct ferry__loop *loop = new_loop();
	struct seen rx, nop;
	int sv[2], outstanding = 2, err = 0;
	struct io_uring_sqe *sqe;
	char buf[4];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	seen_init(&rx, loop, &outstanding);
	seen_init(&nop, loop, &outstanding);
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[0], buf, sizeof(buf), 0, on_seen));
	ftest_assert_ok(ferry__loop_cancel(&rx.req));
	sqe = ferry__loop_raw(loop, &nop.req, on_seen, &err);
	ftest_assert_ptr_notnull(sqe);
	io_uring_prep_nop(sqe);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(rx.result, -ECANCELED);
	ftest_assert_int_eq(nop.result, 0);
	ferry__loop_destroy(loop);
	close(sv[0]);
	close(sv[1]);
}

/* ---- fault injection ---- */

FTEST(inject_error_into_recv)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__loop_fault fault = {
		.op = FERRY_LOOP_OP_RECV, .count = 1, .result = -ECONNRESET};
	int sv[2], outstanding = 1;
	struct seen rx;
	char buf[4];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__loop_inject(loop, &fault));
	ftest_assert_int_eq(write(sv[1], "abcd", 4), 4);
	seen_init(&rx, loop, &outstanding);
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[0], buf, sizeof(buf), 0, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(rx.result, -ECONNRESET);
	/* Only one was armed: the next recv is real. */
	ftest_assert_int_eq(write(sv[1], "efgh", 4), 4);
	outstanding = 1;
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[0], buf, sizeof(buf), 0, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(rx.result, 4);
	ferry__loop_destroy(loop);
	close(sv[0]);
	close(sv[1]);
}

struct race_timer {
	struct ferry__loop_timer timer; /* 1 ms */
	struct seen *tx;		/* must not have completed yet */
	int fired;			/* 1 once run */
};

static void on_race_timer(struct ferry__loop_timer *t, int status)
{
	struct race_timer *r = FERRY_CONTAINER_OF(t, struct race_timer, timer);

	ftest_assert_int_eq(status, 0);
	ftest_assert_int_eq(r->tx->finals, 0);
	r->fired = 1;
}

static bool kernel_idle(void *arg)
{
	return ferry__loop_inflight(arg) == 1;
}

/* A delayed completion's deadline is after the 1 ms timer's, whatever the machine's speed, so
 * the timer fires first; then the held send completes with its real result. A held recv that is
 * cancelled completes with -ECANCELED. */
FTEST(inject_delay_and_cancel_a_held_completion)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__loop_fault fault = {.op = FERRY_LOOP_OP_SEND, .count = 1, .delay_ms = 30};
	struct race_timer r = {.fired = 0};
	int sv[2], outstanding = 1;
	struct seen tx, rx;
	char buf[4];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__loop_inject(loop, &fault));
	seen_init(&tx, loop, &outstanding);
	r.tx = &tx;
	ftest_assert_ok(ferry__loop_timer_start(loop, &r.timer, 1, 0, on_race_timer));
	ftest_assert_ok(ferry__loop_send(loop, &tx.req, sv[0], "wxyz", 4, 0, on_seen));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(r.fired, 1);
	ftest_assert_int_eq(tx.result, 4);

	fault = (struct ferry__loop_fault){.op = FERRY_LOOP_OP_RECV, .count = 1, .delay_ms = 60000};
	ftest_assert_ok(ferry__loop_inject(loop, &fault));
	outstanding = 1;
	seen_init(&rx, loop, &outstanding);
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[1], buf, sizeof(buf), 0, on_seen));
	/* Run until the recv completed in the kernel and is held: only the wake read is left. */
	run_until(loop, kernel_idle, loop);
	ftest_assert_true(ferry__loop_req_pending(&rx.req));
	ftest_assert_ok(ferry__loop_cancel(&rx.req));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(rx.result, -ECANCELED);
	ferry__loop_destroy(loop);
	close(sv[0]);
	close(sv[1]);
}

/* An injected error ends a multishot accept: the connection it would have delivered is closed
 * (the client reads EOF) and the final callback carries the error. */
FTEST(inject_error_ends_multishot_accept)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__loop_fault fault = {
		.op = FERRY_LOOP_OP_ACCEPT, .count = 1, .result = -ECONNRESET};
	struct sockaddr_in addr;
	int lfd = tcp_listener(4, &addr), cfd = tcp_socket(), outstanding = 1;
	struct seen acc;
	char byte;

	ftest_assert_ok(ferry__loop_inject(loop, &fault));
	seen_init(&acc, loop, &outstanding);
	ftest_assert_ok(ferry__loop_accept(loop, &acc.req, lfd, on_seen));
	ftest_assert_int_eq(connect(cfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(acc.result, -ECONNRESET);
	ftest_assert_int_eq(acc.nresults, 0);
	ftest_assert_int_eq(acc.finals, 1);
	ftest_assert_int_eq(read(cfd, &byte, 1), 0);
	ferry__loop_destroy(loop);
	close(cfd);
	close(lfd);
}

struct everything {
	struct seen recv, accept, poll, connect, send, held, timer_seen; /* the requests */
	struct ferry__loop_timer timer;					 /* a 60 s timer */
	int timer_status;						 /* its status */
	int timer_calls;						 /* its calls */
	int post_status;						 /* the post's status */
	int post_calls;							 /* its calls */
};

static void on_long_timer(struct ferry__loop_timer *t, int status)
{
	struct everything *e = FERRY_CONTAINER_OF(t, struct everything, timer);

	e->timer_calls++;
	e->timer_status = status;
}

static void on_everything_post(void *arg, int status)
{
	struct everything *e = arg;

	e->post_calls++;
	e->post_status = status;
}

static void on_short(struct ferry__loop_timer *t, int status)
{
	ftest_assert_int_eq(status, 0);
	ferry__loop_stop(t->loop);
}

/*
 * Destroy with one of everything in flight: a recv, a multishot accept, a multishot poll, a
 * connect that hangs, a send blocked on a full socket, a completion held by an injected delay,
 * a timer and a post. Each callback runs exactly once, with -ECANCELED; nothing leaks.
 */
static void destroy_with_everything(bool run_first)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__loop_fault fault = {.op = FERRY_LOOP_OP_RAW, .count = 1, .delay_ms = 60000};
	static struct everything e;
	struct sockaddr_in addr, addr0;
	size_t big = 16 << 20;
	char *bigbuf = calloc(1, big), rbuf[8];
	int sv[2], sv2[2], lfd = tcp_listener(4, &addr), lfd0 = tcp_listener(0, &addr0);
	int first = tcp_socket(), cfd = tcp_socket(), efd = eventfd(0, EFD_CLOEXEC), err;
	struct ferry__loop_timer stopper = {0};
	struct io_uring_sqe *sqe;
	struct seen *all[] = {&e.recv, &e.accept, &e.poll, &e.connect, &e.send, &e.held};

	memset(&e, 0, sizeof(e));
	ftest_assert_ptr_notnull(bigbuf);
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), 0);
	ftest_assert_int_eq(connect(first, (struct sockaddr *)&addr0, sizeof(addr0)), 0);
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(all); i++)
		seen_init(all[i], loop, NULL);
	ftest_assert_ok(ferry__loop_recv(loop, &e.recv.req, sv[0], rbuf, sizeof(rbuf), 0, on_seen));
	ftest_assert_ok(ferry__loop_accept(loop, &e.accept.req, lfd, on_seen));
	ftest_assert_ok(ferry__loop_poll(loop, &e.poll.req, efd, POLLIN, true, on_seen));
	ftest_assert_ok(ferry__loop_connect(loop, &e.connect.req, cfd, (struct sockaddr *)&addr0,
					    sizeof(addr0), 60000, on_seen));
	ftest_assert_ok(
		ferry__loop_send(loop, &e.send.req, sv2[0], bigbuf, big, MSG_WAITALL, on_seen));
	ftest_assert_ok(ferry__loop_inject(loop, &fault));
	sqe = ferry__loop_raw(loop, &e.held.req, on_seen, &err);
	ftest_assert_ptr_notnull(sqe);
	io_uring_prep_nop(sqe);
	ftest_assert_ok(ferry__loop_timer_start(loop, &e.timer, 60000, 0, on_long_timer));
	if (run_first) {
		ftest_assert_ok(ferry__loop_timer_start(loop, &stopper, 20, 0, on_short));
		ftest_assert_ok(ferry__loop_run(loop));
		ftest_assert_true(ferry__loop_req_pending(&e.held.req));
	}
	ftest_assert_ok(ferry__loop_post(loop, on_everything_post, &e));
	ferry__loop_destroy(loop);
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(all); i++) {
		ftest_assert_int_eq(all[i]->calls, 1);
		ftest_assert_int_eq(all[i]->finals, 1);
		ftest_assert_errno(all[i]->result, -ECANCELED);
	}
	ftest_assert_int_eq(e.timer_calls, 1);
	ftest_assert_errno(e.timer_status, -ECANCELED);
	ftest_assert_int_eq(e.post_calls, 1);
	ftest_assert_errno(e.post_status, -ECANCELED);
	free(bigbuf);
	close(sv[0]);
	close(sv[1]);
	close(sv2[0]);
	close(sv2[1]);
	close(lfd);
	close(lfd0);
	close(first);
	close(cfd);
	close(efd);
}

FTEST(destroy_cancels_everything_in_flight)
{
	destroy_with_everything(true);
}

FTEST(destroy_before_run_cancels_unsubmitted_requests)
{
	destroy_with_everything(false);
}

struct issuer {
	struct ferry__loop *loop; /* created on the main thread */
	int run_result;		  /* ferry__loop_run() in the other thread */
	struct seen rx, tx;	  /* submitted before run */
	int sv[2];		  /* the pair */
	char buf[8];		  /* receive buffer */
	int outstanding;	  /* finals to wait for */
};

static void *run_elsewhere(void *arg)
{
	struct issuer *is = arg;

	is->run_result = ferry__loop_run(is->loop);
	ferry__loop_destroy(is->loop);
	return NULL;
}

/* Single-issuer mode: requests made on the creating thread are submitted by the first thread
 * that runs the loop, which then owns it (and destroys it). */
FTEST(single_issuer_loop_runs_on_another_thread)
{
	struct ferry__loop_opts opts = {.flags = FERRY_LOOP_SINGLE_ISSUER};
	struct issuer is = {.outstanding = 2};
	pthread_t thread;

	ftest_assert_ok(ferry__loop_create(&opts, &is.loop));
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, is.sv), 0);
	seen_init(&is.rx, is.loop, &is.outstanding);
	seen_init(&is.tx, is.loop, &is.outstanding);
	ftest_assert_ok(ferry__loop_recv(is.loop, &is.rx.req, is.sv[0], is.buf, sizeof(is.buf), 0,
					 on_seen));
	ftest_assert_ok(ferry__loop_send(is.loop, &is.tx.req, is.sv[1], "abc", 4, 0, on_seen));
	ftest_assert_int_eq(pthread_create(&thread, NULL, run_elsewhere, &is), 0);
	pthread_join(thread, NULL);
	ftest_assert_ok(is.run_result);
	ftest_assert_int_eq(is.rx.result, 4);
	ftest_assert_str_eq(is.buf, "abc");
	close(is.sv[0]);
	close(is.sv[1]);
}

/* cancel_fd cancels every request on the fd, and only those. */
FTEST(cancel_fd_cancels_all_requests_on_it)
{
	struct ferry__loop *loop = new_loop();
	struct seen rx, poll_req, other;
	int sv[2], sv2[2], outstanding = 2;
	char buf[4], buf2[4];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), 0);
	seen_init(&rx, loop, &outstanding);
	seen_init(&poll_req, loop, &outstanding);
	seen_init(&other, loop, NULL);
	ftest_assert_ok(ferry__loop_recv(loop, &rx.req, sv[0], buf, sizeof(buf), 0, on_seen));
	ftest_assert_ok(ferry__loop_poll(loop, &poll_req.req, sv[0], POLLIN, true, on_seen));
	ftest_assert_ok(ferry__loop_recv(loop, &other.req, sv2[0], buf2, sizeof(buf2), 0, on_seen));
	ftest_assert_ok(ferry__loop_cancel_fd(loop, sv[0]));
	ftest_assert_errno(ferry__loop_cancel_fd(loop, -1), -EBADF);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(rx.result, -ECANCELED);
	ftest_assert_errno(poll_req.result, -ECANCELED);
	ftest_assert_true(ferry__loop_req_pending(&other.req));
	ferry__loop_destroy(loop);
	ftest_assert_errno(other.result, -ECANCELED);
	close(sv[0]);
	close(sv[1]);
	close(sv2[0]);
	close(sv2[1]);
}
