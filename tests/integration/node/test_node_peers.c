/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime socket against peers that hold the cluster token and flood it (node/rt_srv.c):
 * drivers from other hosts that fill its connections leave room for the node's own workers and
 * for local drivers, and the extra ones are refused -EUSERS with one log line; one driver's lease
 * requests take at most half the node's queue, so others' still wait their turn. A real GCS and a
 * node in this process whose workers are fake_worker processes (built beside this test).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/embed.h"
#include "common/util.h"
#include "node/node.h"
#include "plasma/store.h"
#include "tests/harness/ftest.h"
#include "tests/integration/node/node_fx.h"
#include "tests/integration/node/rt_peer.h"
#include "transport/objmgr.h"

/* A hang guard for what must come (a reply, a grant), far above an honest wait. */
#define WAIT_MS 20000u
/* node/rt_int.h: drivers and CLIs connected at once, and of them over TCP. */
#define MAX_PEERS 1024
#define MAX_TCP_PEERS 768
/* Connections the flood tries past the TCP share before it gives up looking for a refusal. */
#define FLOOD_SLACK 300
/* Refused after the share is full: all answered, one line logged for them. */
#define EXTRA 16
/* node/rt_int.h: lease requests alive at one node, and of one connection. */
#define QUEUE_MAX 100000u
#define PEER_SHARE 50000u
/* A connection that has sent nothing more for this long has been answered all it will be. */
#define QUIET_MS 1000

static const char token[] = "node-peers-test-token";

struct fx {
	struct ferry__embed_gcs *gcs;
	struct ferry__node *node;
	struct ferry__node_addr addr; /* the node's, with its runtime TCP port */
	struct ferry__fb_builder fb;
	char exe[4096];
};

/* A GCS and a node with no prestarted worker, at most @max_workers, offering @cpus CPUs. */
static void fx_start(struct fx *f, const char *cpus, uint32_t max_workers)
{
	struct ferry__node_opts o;
	struct node_fx_strings s;
	const char *text;

	memset(f, 0, sizeof(*f));
	ftest_assert_ok(rtp_fake_worker_path(f->exe, sizeof(f->exe)));
	node_fx_begin(&o, &s, &f->gcs, token, f->exe);
	o.num_cpus = cpus;
	o.num_workers = -1;
	o.max_workers = max_workers;
	ftest_assert_ok(ferry__node_start(&o, &f->node));
	text = ferry__node_address(f->node);
	ftest_assert_ok(ferry__node_addr_parse(text, strlen(text), &f->addr));
	ftest_assert_uint_ne(f->addr.rt_port, 0);
}

static void fx_stop(struct fx *f)
{
	ferry__node_stop(f->node);
	ferry__embed_gcs_stop(f->gcs);
	ferry__fb_builder_fini(&f->fb);
}

/* Send a RuntimeConnect of @kind on @fd: the reply's status, or the error reading it. */
static int runtime_connect(struct fx *f, int fd, uint8_t kind)
{
	struct ferry__wire_runtime_connect m = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						.kind = kind,
						.pid = (int32_t)getpid()};
	struct rtp_frame fr;
	int r;

	ferry_id_random(m.id.bytes, sizeof(m.id.bytes));
	ferry_id_random(m.job.bytes, sizeof(m.job.bytes));
	if (kind == FERRY__WIRE_PEER_KIND_WORKER)
		m.listen_path = "/nonexistent/worker.sock";
	r = rtp_send(fd, &f->fb, FERRY__WIRE_MSG_RUNTIME_CONNECT,
		     ferry__wire_runtime_connect_build(&f->fb, &m));
	if (r == 0)
		r = rtp_recv(fd, &fr, WAIT_MS);
	if (r < 0)
		return r;
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY);
	r = ferry__wire_runtime_connect_reply_status(
		ferry__wire_runtime_connect_reply_root_verified(fr.payload));
	rtp_frame_free(&fr);
	return r;
}

/* A driver on another host: TCP to the node's runtime port, the token's Handshake, then
 * RuntimeConnect. The socket, its RuntimeConnect's status (or the error reading a reply) in
 * *@status. */
static int tcp_driver(struct fx *f, int *status)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(f->addr.rt_port)};
	struct ferry__wire_handshake hs = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
					   .token = (const uint8_t *)token,
					   .token_count = sizeof(token) - 1,
					   .peer_kind = FERRY__WIRE_PEER_KIND_DRIVER,
					   .pid = (int32_t)getpid(),
					   .name = "flood"};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct rtp_frame fr;

	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(inet_pton(AF_INET, f->addr.ip, &sin.sin_addr), 1);
	ftest_assert_ok(connect(fd, (struct sockaddr *)&sin, sizeof(sin)));
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_HANDSHAKE,
				 ferry__wire_handshake_build(&f->fb, &hs)));
	*status = rtp_recv(fd, &fr, WAIT_MS);
	if (*status < 0)
		return fd;
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_HANDSHAKE_REPLY);
	ftest_assert_int_eq(ferry__wire_handshake_reply_status(
				    ferry__wire_handshake_reply_root_verified(fr.payload)),
			    0);
	rtp_frame_free(&fr);
	*status = runtime_connect(f, fd, FERRY__WIRE_PEER_KIND_DRIVER);
	return fd;
}

/* A request for 1 CPU; @placed: it follows a placement, so it waits here (never forwarded). */
static void request_lease(struct fx *f, int fd, uint64_t request_id, bool placed)
{
	struct ferry__wire_runtime_resource cpu = {.name = "CPU", .amount = 1.0};
	struct ferry__wire_lease_request m = {.request_id = request_id,
					      .resources = &cpu,
					      .resources_count = 1,
					      .placed = placed};

	ferry_id_random(m.job.bytes, sizeof(m.job.bytes));
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_LEASE_REQUEST,
				 ferry__wire_lease_request_build(&f->fb, &m)));
}

/* The status of the LeaseGrant answering @request_id. */
static int grant_status(int fd, uint64_t request_id)
{
	struct ferry__wire_lease_grant_view v;
	struct rtp_frame fr;
	int status;

	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_LEASE_GRANT);
	v = ferry__wire_lease_grant_root_verified(fr.payload);
	ftest_assert_uint_eq(ferry__wire_lease_grant_request_id(v), request_id);
	status = ferry__wire_lease_grant_status(v);
	rtp_frame_free(&fr);
	return status;
}

static unsigned count_of(const char *text, const char *what)
{
	unsigned n = 0;

	for (const char *s = strstr(text, what); s; s = strstr(s + 1, what))
		n++;
	return n;
}

/* Remote token holders fill the node's runtime connections as drivers: past the TCP share they
 * are refused -EUSERS (one line for all), and a local driver still connects, and the node still
 * starts a worker that connects and serves a lease. Before, the 1,024th connection of any kind
 * was closed unanswered: the node's new workers, and local drivers, were locked out. */
FTEST(remote_drivers_cannot_lock_the_pool_out)
{
	static int fds[MAX_PEERS + FLOOD_SLACK];
	int nfds = 0, admitted = 0, status = 0, first_refusal, fd, impostor;
	struct fx f;

	fx_start(&f, "2", 2);
	ftest_log_capture_start();
	/* Until the first one not admitted (before: closed unanswered, -ECONNRESET). */
	while (status == 0 && nfds < MAX_PEERS + FLOOD_SLACK - EXTRA) {
		fds[nfds++] = tcp_driver(&f, &status);
		admitted += status == 0;
	}
	first_refusal = status;
	for (int i = 0; i < EXTRA; i++) {
		fds[nfds++] = tcp_driver(&f, &status);
		ftest_assert_int_eq(status, first_refusal);
	}
	/* A local driver has room, and a worker the node did not start gets none of its own. */
	fd = rtp_connect(ferry__node_runtime_socket(f.node));
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(runtime_connect(&f, fd, FERRY__WIRE_PEER_KIND_DRIVER), 0);
	impostor = rtp_connect(ferry__node_runtime_socket(f.node));
	ftest_assert_int_ge(impostor, 0);
	ftest_assert_int_eq(runtime_connect(&f, impostor, FERRY__WIRE_PEER_KIND_WORKER), -EACCES);
	close(impostor);
	/* The node starts a worker (none runs yet) and it connects: a lease is granted to both a
	 * remote driver and the local one. */
	request_lease(&f, fds[0], 1, false);
	ftest_assert_int_eq(grant_status(fds[0], 1), 0);
	request_lease(&f, fd, 2, false);
	ftest_assert_int_eq(grant_status(fd, 2), 0);
	ftest_log_capture_stop();
	/* The remote ones past the TCP share were refused, answered why, with one line. */
	ftest_assert_int_eq(first_refusal, -EUSERS);
	ftest_assert_int_eq(admitted, MAX_TCP_PEERS);
	ftest_assert_uint_eq(count_of(ftest_log_captured(), "connected over TCP, the most"), 1);
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "refusing a driver (at 127.0.0.1:"));
	close(fd);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	fx_stop(&f);
}

static int local_driver(struct fx *f)
{
	int fd = rtp_connect(ferry__node_runtime_socket(f->node));

	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(runtime_connect(f, fd, FERRY__WIRE_PEER_KIND_DRIVER), 0);
	return fd;
}

struct tally {
	uint32_t granted; /* status 0 */
	uint32_t full;	  /* -ENOSPC */
	uint32_t other;	  /* anything else */
};

/* Read the LeaseGrants @fd has for us, waiting up to @wait_ms for each next one. */
static void drain(int fd, struct tally *t, int wait_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	struct rtp_frame fr;
	int status;

	while (poll(&pfd, 1, wait_ms) == 1) {
		ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
		ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_LEASE_GRANT);
		status = ferry__wire_lease_grant_status(
			ferry__wire_lease_grant_root_verified(fr.payload));
		rtp_frame_free(&fr);
		if (status == 0)
			t->granted++;
		else if (status == -ENOSPC)
			t->full++;
		else
			t->other++;
	}
}

/* One driver sends more lease requests than the node's whole queue holds: past its share it is
 * refused -ENOSPC (rate-limited lines), and another driver's request still waits its turn.
 * Before, the one driver filled all 100,000 places and the other was refused -ENOSPC. */
FTEST(one_driver_cannot_fill_the_lease_queue)
{
	const uint32_t sent = QUEUE_MAX + EXTRA;
	struct tally t = {0};
	struct rtp_frame fr;
	struct fx f;
	int a, b;

	fx_start(&f, "1", 1); /* one lease at a time: every other request waits */
	a = local_driver(&f);
	b = local_driver(&f);
	ftest_log_capture_start();
	for (uint32_t id = 1; id <= sent; id++) {
		request_lease(&f, a, id, true);
		if (id % 256 == 0)
			drain(a, &t, 0); /* neither side waits on a full socket */
	}
	drain(a, &t, QUIET_MS);
	request_lease(&f, b, 1, true);
	ftest_assert_errno(rtp_recv(b, &fr, 300), -ETIMEDOUT); /* waits: not refused */
	ftest_log_capture_stop();
	ftest_assert_uint_eq(t.full, sent - PEER_SHARE);
	ftest_assert_uint_eq(t.granted, 1);
	ftest_assert_uint_eq(t.other, 0);
	ftest_assert_uint_le(count_of(ftest_log_captured(), "the most one connection may have"), 6);
	ftest_assert_uint_ge(count_of(ftest_log_captured(), "the most one connection may have"), 1);
	close(a);
	close(b);
	fx_stop(&f);
}
