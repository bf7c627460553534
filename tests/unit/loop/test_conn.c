/* SPDX-License-Identifier: Apache-2.0 */
/* Framed connections on socketpairs: ordering across partial reads and writes, frames split and
 * batched, close semantics, malformed input, peers closing mid-message, injected faults, limits,
 * and allocation failures. */
#include <fcntl.h>
#include <poll.h>

#include "conn_test.h"

struct pair {
	struct ferry__loop *loop; /* shared */
	struct peer a, b;	  /* the two ends */
	int sv[2];		  /* the socketpair, owned by the conns once opened */
	uint64_t expected;	  /* messages b should see */
};

static void pair_open(struct pair *p, int type)
{
	struct ferry__conn_opts oa = peer_opts(&p->a), ob = peer_opts(&p->b);

	p->loop = new_loop();
	p->a.loop = p->b.loop = p->loop;
	ftest_assert_int_eq(socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, p->sv), 0);
	ftest_assert_ok(ferry__conn_open(p->loop, p->sv[0], &oa, &p->a.conn));
	ftest_assert_ok(ferry__conn_open(p->loop, p->sv[1], &ob, &p->b.conn));
}

static bool both_closed(void *arg)
{
	struct pair *p = arg;

	return p->a.closes && p->b.closes;
}

/* Thousands of messages of varied sizes, both ways at once: all arrive, in order, intact. */
FTEST(socketpair_messages_in_order_both_ways)
{
	enum { N = 2000 };
	struct pair p = {0};

	pair_open(&p, SOCK_STREAM);
	p.b.stop_after = N;
	for (uint64_t i = 0; i < N; i++) {
		ftest_assert_ok(msg_send(p.a.conn, i, (size_t)(i * 37) % 5000));
		ftest_assert_ok(msg_send(p.b.conn, i, (size_t)(i * 11) % 300));
	}
	ftest_assert_uint_gt(ferry__conn_queued_bytes(p.a.conn), 0);
	ftest_assert_ok(ferry__loop_run(p.loop));
	ftest_assert_int_eq(p.a.connects, 1);
	ftest_assert_int_eq(p.b.connects, 1);
	ftest_assert_uint_eq(p.b.received, N);
	ftest_assert_int_eq(p.b.bad, 0);
	ferry__conn_close(p.a.conn);
	ferry__conn_close(p.a.conn); /* no-op */
	run_until(p.loop, both_closed, &p);
	ftest_assert_uint_eq(p.a.received, N);
	ftest_assert_int_eq(p.a.bad, 0);
	ftest_assert_int_eq(p.a.closes, 1);
	ftest_assert_int_eq(p.a.close_err, 0);
	ftest_assert_int_eq(p.b.closes, 1);
	ftest_assert_errno(p.b.close_err, -ECONNRESET);
	ferry__loop_destroy(p.loop);
}

/* Writes a buffer one byte per loop pass, so that reads end everywhere inside frames. */
struct dribble {
	struct ferry__loop_timer timer; /* 1 ms repeating */
	int fd;				/* raw end */
	const uint8_t *data;		/* what to write */
	size_t size, off;		/* its size, bytes written */
};

static void on_dribble(struct ferry__loop_timer *t, int status)
{
	struct dribble *d = FERRY_CONTAINER_OF(t, struct dribble, timer);

	ftest_assert_int_eq(status, 0);
	write_all(d->fd, d->data + d->off++, 1);
	if (d->off == d->size)
		ftest_assert_ok(ferry__loop_timer_stop(t));
}

/* Frames dribbled byte by byte, then many frames in one write: the parser reassembles both. */
FTEST(frames_split_across_reads_and_batched_in_one)
{
	struct ferry__conn_opts opts;
	struct ferry__loop *loop = new_loop();
	struct peer rx = {.loop = loop};
	struct dribble d = {0};
	uint8_t *frames[20], *all;
	size_t sizes[20], total = 0, off = 0;
	int sv[2];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	opts = peer_opts(&rx);
	ftest_assert_ok(ferry__conn_open(loop, sv[0], &opts, &rx.conn));
	for (int i = 0; i < 20; i++) {
		frames[i] = frame_of((uint64_t)i, (size_t)i * 100, &sizes[i]);
		total += sizes[i];
	}
	all = malloc(total);
	ftest_assert_ptr_notnull(all);
	for (int i = 0; i < 20; i++) {
		memcpy(all + off, frames[i], sizes[i]);
		off += sizes[i];
	}
	/* The first two frames byte by byte, the other 18 in one write. */
	d = (struct dribble){.fd = sv[1], .data = all, .size = sizes[0] + sizes[1]};
	rx.stop_after = 2;
	ftest_assert_ok(ferry__loop_timer_start(loop, &d.timer, 0, 1, on_dribble));
	ftest_assert_ok(ferry__loop_run(loop));
	rx.stop_after = 20;
	write_all(sv[1], all + d.size, total - d.size);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_uint_eq(rx.received, 20);
	ftest_assert_int_eq(rx.bad, 0);
	free(all);
	for (int i = 0; i < 20; i++)
		ferry__free(frames[i]);
	close(sv[1]);
	rx.stop_on_close = true;
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(rx.close_err, -ECONNRESET);
	ferry__loop_destroy(loop);
}

/* A peer that closes halfway through a frame: -ECONNRESET (and a log line). */
FTEST(peer_closing_mid_message)
{
	struct ferry__loop *loop = new_loop();
	struct peer rx = {.loop = loop, .stop_on_close = true};
	struct ferry__conn_opts opts = peer_opts(&rx);
	size_t size;
	uint8_t *frame = frame_of(1, 1000, &size);
	int sv[2];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__conn_open(loop, sv[0], &opts, &rx.conn));
	write_all(sv[1], frame, size / 2);
	close(sv[1]);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_int_eq(rx.closes, 1);
	ftest_assert_errno(rx.close_err, -ECONNRESET);
	ftest_assert_uint_eq(rx.received, 0);
	ferry__free(frame);
	ferry__loop_destroy(loop);
}

static void garbage_case(const uint8_t *bytes, size_t len, uint64_t good_before)
{
	struct ferry__loop *loop = new_loop();
	struct peer rx = {.loop = loop, .stop_on_close = true};
	struct ferry__conn_opts opts = peer_opts(&rx);
	int sv[2];

	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__conn_open(loop, sv[0], &opts, &rx.conn));
	for (uint64_t i = 0; i < good_before; i++) {
		size_t size;
		uint8_t *frame = frame_of(i, 10, &size);

		write_all(sv[1], frame, size);
		ferry__free(frame);
	}
	write_all(sv[1], bytes, len);
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_uint_eq(rx.received, good_before);
	ftest_assert_errno(rx.close_err, -EPROTO);
	ferry__loop_destroy(loop);
	close(sv[1]);
}

FTEST(garbage_bad_magic_is_eproto)
{
	static const uint8_t junk[] = "GET / HTTP/1.1\r\n\r\n";

	garbage_case(junk, sizeof(junk), 3);
}

/* A well-formed header around a payload that is not a valid message: the verifier refuses it
 * before the user sees anything. */
FTEST(garbage_payload_fails_verification)
{
	uint8_t frame[FERRY_FRAME_HEADER_SIZE + 16];

	memset(frame, 0xAB, sizeof(frame));
	ferry__frame_header_encode(frame, MSG_TYPE, 16);
	garbage_case(frame, sizeof(frame), 2);
}

FTEST(oversize_frame_is_refused_before_its_payload)
{
	uint8_t header[FERRY_FRAME_HEADER_SIZE];

	ferry__frame_header_encode(header, MSG_TYPE, FERRY_FRAME_MAX_LENGTH_DEFAULT + 1);
	garbage_case(header, sizeof(header), 1);
}

FTEST(send_limits_and_send_after_close)
{
	struct pair p = {0};
	char big[64] = {0};
	int fd = 0;

	pair_open(&p, SOCK_STREAM);
	ftest_assert_errno(ferry__conn_send(p.a.conn, MSG_TYPE, big,
					    (size_t)FERRY_FRAME_MAX_LENGTH_DEFAULT + 1),
			   -EMSGSIZE);
	ftest_assert_errno(ferry__conn_send_fds(p.a.conn, MSG_TYPE, big, 8, &fd, 0), -EINVAL);
	ftest_assert_errno(ferry__conn_send_fds(p.a.conn, MSG_TYPE, big, 8, &fd, 99), -EINVAL);
	ftest_assert_errno(ferry__conn_send_borrowed(p.a.conn, MSG_TYPE, big, 8, NULL, NULL),
			   -EINVAL);
	ferry__conn_close(p.a.conn);
	ftest_assert_errno(msg_send(p.a.conn, 0, 1), -ENOTCONN);
	run_until(p.loop, both_closed, &p);
	ftest_assert_int_eq(p.a.closes, 1);
	ferry__loop_destroy(p.loop);
}

/* A receiver with a smaller limit than the sender refuses the frame from its header. */
FTEST(receiver_limit_smaller_than_message)
{
	struct ferry__loop *loop = new_loop();
	struct peer a = {.loop = loop}, b = {.loop = loop, .stop_on_close = true};
	struct ferry__conn_opts oa = peer_opts(&a), ob = peer_opts(&b);
	int sv[2];

	ob.max_message_bytes = 1024;
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__conn_open(loop, sv[0], &oa, &a.conn));
	ftest_assert_ok(ferry__conn_open(loop, sv[1], &ob, &b.conn));
	ftest_assert_ok(msg_send(a.conn, 0, 100));
	ftest_assert_ok(msg_send(a.conn, 1, 5000));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_uint_eq(b.received, 1);
	ftest_assert_errno(b.close_err, -EPROTO);
	ferry__conn_close(a.conn);
	a.stop_on_close = true;
	ftest_assert_ok(ferry__loop_run(loop));
	ferry__loop_destroy(loop);
}

/* Loop fault injection reaches the connection as a real error would. */
FTEST(injected_recv_reset_closes_with_econnreset)
{
	struct pair p = {0};
	struct ferry__loop_fault fault = {
		.op = FERRY_LOOP_OP_RECVMSG, .count = 1, .result = -ECONNRESET};

	pair_open(&p, SOCK_STREAM);
	ftest_assert_ok(ferry__loop_inject(p.loop, &fault));
	ftest_assert_ok(msg_send(p.a.conn, 0, 10));
	p.b.stop_on_close = true;
	ftest_assert_ok(ferry__loop_run(p.loop));
	ftest_assert_errno(p.b.close_err, -ECONNRESET);
	ftest_assert_uint_eq(p.b.received, 0);
	run_until(p.loop, both_closed, &p);
	ferry__loop_destroy(p.loop);
}

FTEST(injected_send_error_closes_the_sender)
{
	struct pair p = {0};
	struct ferry__loop_fault fault = {
		.op = FERRY_LOOP_OP_SENDMSG, .count = 1, .result = -EPIPE};

	pair_open(&p, SOCK_STREAM);
	ftest_assert_ok(ferry__loop_inject(p.loop, &fault));
	ftest_assert_ok(msg_send(p.a.conn, 0, 10));
	run_until(p.loop, both_closed, &p);
	ftest_assert_errno(p.a.close_err, -ECONNRESET);
	ferry__loop_destroy(p.loop);
}

struct borrowed {
	int calls;  /* done callbacks */
	int status; /* the last status */
};

static void on_borrowed_done(void *arg, int status)
{
	struct borrowed *b = arg;

	b->calls++;
	b->status = status;
}

/* Borrowed payloads: done(0) once written; done(-ECANCELED) if closed before. */
FTEST(borrowed_send_done_once)
{
	struct pair p = {0};
	struct ferry__fb_builder fb = {0};
	struct borrowed sent = {0}, dropped = {0};

	pair_open(&p, SOCK_STREAM);
	msg_build(&fb, 0, 3000);
	p.b.stop_after = 1;
	ftest_assert_ok(ferry__conn_send_borrowed(p.a.conn, MSG_TYPE, ferry__fb_builder_data(&fb),
						  ferry__fb_builder_size(&fb), on_borrowed_done,
						  &sent));
	ftest_assert_int_eq(sent.calls, 0);
	ftest_assert_ok(ferry__loop_run(p.loop));
	ftest_assert_int_eq(sent.calls, 1);
	ftest_assert_int_eq(sent.status, 0);
	ftest_assert_int_eq(p.b.bad, 0);
	/* Queued on a connection still connecting... here: closed before the loop runs. */
	ftest_assert_ok(ferry__conn_send_borrowed(p.b.conn, MSG_TYPE, ferry__fb_builder_data(&fb),
						  ferry__fb_builder_size(&fb), on_borrowed_done,
						  &dropped));
	ferry__conn_close(p.b.conn);
	run_until(p.loop, both_closed, &p);
	ftest_assert_int_eq(dropped.calls, 1);
	ftest_assert_int_le(dropped.status, 0);
	ferry__fb_builder_fini(&fb);
	ferry__loop_destroy(p.loop);
}

/* fds attached to messages arrive with their own message, among messages without fds. */
FTEST(fd_passing_on_a_socketpair)
{
	struct pair p = {0};
	int pipes[3][2], before, fd;
	char c;

	pair_open(&p, SOCK_STREAM);
	p.b.take_fds = true;
	p.b.stop_after = 6;
	for (int i = 0; i < 3; i++)
		ftest_assert_int_eq(pipe2(pipes[i], O_CLOEXEC), 0);
	before = open_fd_count();
	for (uint64_t i = 0; i < 6; i++) {
		struct ferry__fb_builder fb = {0};

		msg_build(&fb, i, 50);
		if (i % 2)
			ftest_assert_ok(ferry__conn_send_fds(
				p.a.conn, MSG_TYPE, ferry__fb_builder_data(&fb),
				ferry__fb_builder_size(&fb), pipes[i / 2], i == 5 ? 2 : 1));
		else
			ftest_assert_ok(ferry__conn_send(p.a.conn, MSG_TYPE,
							 ferry__fb_builder_data(&fb),
							 ferry__fb_builder_size(&fb)));
		ferry__fb_builder_fini(&fb);
	}
	ftest_assert_ok(ferry__loop_run(p.loop));
	ftest_assert_int_eq(p.b.bad, 0);
	ftest_assert_int_eq(p.b.nfds, 4);
	ftest_assert_int_eq(p.b.fd_msgs[0], 1);
	ftest_assert_int_eq(p.b.fd_msgs[1], 3);
	ftest_assert_int_eq(p.b.fd_msgs[2], 5);
	ftest_assert_int_eq(p.b.fd_msgs[3], 5);
	/* Each received fd is the read end sent: write into the pipe, read through it. */
	for (int i = 0; i < 3; i++) {
		fd = p.b.fds[i];
		write_all(pipes[i][1], "z", 1);
		ftest_assert_int_eq(read(fd, &c, 1), 1);
		ftest_assert_int_eq(c, 'z');
	}
	/* The fourth is message 5's write end: reading the pipe's read end sees it. */
	write_all(p.b.fds[3], "w", 1);
	ftest_assert_int_eq(read(pipes[2][0], &c, 1), 1);
	ftest_assert_int_eq(c, 'w');
	/* The sender's duplicates are gone; only the four received fds are new. */
	ftest_assert_int_eq(open_fd_count(), before + 4);
	for (int i = 0; i < 4; i++)
		close(p.b.fds[i]);
	for (int i = 0; i < 3; i++) {
		close(pipes[i][0]);
		close(pipes[i][1]);
	}
	ferry__conn_close(p.a.conn);
	run_until(p.loop, both_closed, &p);
	ferry__loop_destroy(p.loop);
}

/* fds the receiver does not take are closed after on_message: nothing leaks. */
FTEST(untaken_fds_are_closed)
{
	struct pair p = {0};
	int pipefd[2], before;

	pair_open(&p, SOCK_STREAM);
	p.b.stop_after = 2;
	ftest_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	before = open_fd_count();
	for (uint64_t i = 0; i < 2; i++) {
		struct ferry__fb_builder fb = {0};

		msg_build(&fb, i, 10);
		ftest_assert_ok(ferry__conn_send_fds(p.a.conn, MSG_TYPE,
						     ferry__fb_builder_data(&fb),
						     ferry__fb_builder_size(&fb), pipefd, 2));
		ferry__fb_builder_fini(&fb);
	}
	ftest_assert_ok(ferry__loop_run(p.loop));
	ftest_assert_uint_eq(p.b.received, 2);
	ftest_assert_int_eq(open_fd_count(), before);
	close(pipefd[0]);
	close(pipefd[1]);
	ferry__conn_close(p.a.conn);
	run_until(p.loop, both_closed, &p);
	ferry__loop_destroy(p.loop);
}

FTEST(open_rejects_bad_input)
{
	struct ferry__loop *loop = new_loop();
	struct peer p = {.loop = loop};
	struct ferry__conn_opts opts = {0};
	struct ferry__conn *conn = NULL;
	int pipefd[2];

	ftest_assert_errno(ferry__conn_open(loop, 0, &opts, &conn), -EINVAL);
	opts = peer_opts(&p);
	ftest_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	ftest_assert_errno(ferry__conn_open(loop, pipefd[0], &opts, &conn), -ENOTSOCK);
	ftest_assert_ptr_null(conn);
	close(pipefd[0]);
	close(pipefd[1]);
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(p.closes, 0);
}

/* ---- allocation failures ---- */

static bool delivered_or_closed(void *arg)
{
	struct pair *p = arg;

	return p->b.received == p->expected || p->a.closes || p->b.closes;
}

/* Fail each allocation of open + a burst of sends in turn: every failure is reported where it
 * happens (-ENOMEM from the call, or on_close(-ENOMEM)) and nothing leaks. */
FTEST(open_and_send_under_allocation_failure)
{
	for (long n = 0;; n++) {
		struct ferry__fb_builder fb[10] = {0};
		struct pair p = {0};
		struct ferry__conn_opts oa, ob;
		int ret, sent = 0;
		bool fired;

		p.loop = new_loop();
		p.a.loop = p.b.loop = p.loop;
		for (uint64_t i = 0; i < 10; i++)
			msg_build(&fb[i], i, 100 * i);
		oa = peer_opts(&p.a);
		ob = peer_opts(&p.b);
		ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.sv), 0);
		ferry__alloc_fail_after(n);
		ret = ferry__conn_open(p.loop, p.sv[0], &oa, &p.a.conn);
		if (ret < 0) {
			ftest_assert_errno(ret, -ENOMEM);
			close(p.sv[0]);
			p.a.closes = 1;
		}
		ret = ferry__conn_open(p.loop, p.sv[1], &ob, &p.b.conn);
		if (ret < 0) {
			ftest_assert_errno(ret, -ENOMEM);
			close(p.sv[1]);
			p.b.closes = 1;
		}
		for (uint64_t i = 0; p.a.conn && i < 10; i++) {
			ret = ferry__conn_send(p.a.conn, MSG_TYPE, ferry__fb_builder_data(&fb[i]),
					       ferry__fb_builder_size(&fb[i]));
			/* -ENOTCONN: an earlier failure already closed the connection. */
			if (ret < 0 && ret != -ENOTCONN)
				ftest_assert_errno(ret, -ENOMEM);
			else if (ret == 0)
				sent++;
		}
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		p.expected = (uint64_t)sent;
		run_until(p.loop, delivered_or_closed, &p);
		if (p.a.conn)
			ferry__conn_close(p.a.conn);
		if (p.b.conn)
			ferry__conn_close(p.b.conn);
		run_until(p.loop, both_closed, &p);
		ftest_assert_uint_le(p.b.received, (uint64_t)sent);
		ferry__loop_destroy(p.loop);
		for (int i = 0; i < 10; i++)
			ferry__fb_builder_fini(&fb[i]);
		if (!fired) {
			ftest_assert_int_eq(sent, 10);
			break;
		}
	}
}

/* The receive side under allocation failure: the parser cannot grow for a large frame, the
 * connection closes with -ENOMEM. */
FTEST(receive_under_allocation_failure)
{
	struct pair p = {0};

	pair_open(&p, SOCK_STREAM);
	p.b.stop_on_close = true;
	ftest_assert_ok(msg_send(p.a.conn, 0, 100000));
	ferry__alloc_fail_after(0);
	ftest_assert_ok(ferry__loop_run(p.loop));
	ferry__alloc_fail_after(-1);
	ftest_assert_errno(p.b.close_err, -ENOMEM);
	run_until(p.loop, both_closed, &p);
	ferry__loop_destroy(p.loop);
}
