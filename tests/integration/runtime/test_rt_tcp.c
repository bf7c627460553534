/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime endpoint on TCP (node/rt_tcp.c) against peers that do not hold the
 * cluster token: a wrong token is refused with -EACCES, and a flood of silent connections is
 * cut at the handshake cap without growing the node's memory. The node runs in this process
 * (the local cluster), so its memory is ours to measure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "cluster/cluster.h"
#include "cluster/embed.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "transport/objmgr.h"

#define FLOOD 200
#define HANDSHAKING_CAP 64 /* FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING */

static struct ferry__cluster *start(struct ferry__node_addr *a)
{
	struct ferry__cluster_opts co = {.num_workers = 1};
	struct ferry__cluster *c = NULL;
	const char *text;

	ftest_assert_ok(ferry__cluster_start(&co, &c));
	text = ferry__embed_node_address(ferry__cluster_node(c));
	ftest_assert_ok(ferry__node_addr_parse(text, strlen(text), a));
	ftest_assert_uint_ne(a->rt_port, 0); /* advertised */
	return c;
}

/* A client of the token handshake (the GCS client's) presenting @token to the endpoint. */
static int handshake_with(const struct ferry__node_addr *a, const char *token)
{
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;
	char addr[80];
	const char *list[1] = {addr};
	int ret;

	snprintf(addr, sizeof(addr), "%s:%u", a->ip, a->rt_port);
	o.addresses = list;
	o.naddresses = 1;
	o.token = token;
	o.token_len = strlen(token);
	o.timeout_ms = 5000;
	ret = ferry_gcs_client_connect(&o, &c);
	ferry_gcs_client_destroy(c);
	return ret;
}

FTEST(wrong_token_is_refused)
{
	struct ferry__node_addr a;
	struct ferry__cluster *c = start(&a);

	ftest_assert_errno(handshake_with(&a, "not-the-cluster-token"), -EACCES);
	ferry__cluster_stop(c);
}

/* A worker's TCP endpoint, as its node recorded it in the GCS workers table. */
static bool worker_endpoint(struct ferry__cluster *c, struct ferry__node_addr *out)
{
	const char *gcs = ferry__cluster_gcs_address(c);
	struct ferry_gcs_client_opts o = {.addresses = &gcs, .naddresses = 1};
	struct ferry_gcs_worker_info *all = NULL;
	struct ferry_gcs_client *g = NULL;
	bool found = false;
	int n;

	o.token = ferry__cluster_token(c, &o.token_len);
	ftest_assert_ok(ferry_gcs_client_connect(&o, &g));
	n = ferry_gcs_worker_list(g, &all);
	for (int i = 0; i < n && !found; i++)
		found = all[i].address &&
			ferry__node_addr_parse(all[i].address, strlen(all[i].address), out) == 0 &&
			out->rt_port;
	ferry_gcs_free(all);
	ferry_gcs_client_destroy(g);
	return found;
}

/* The same on a worker's endpoint (runtime/worker.c): its token handshake refuses too. */
FTEST(wrong_token_is_refused_by_a_worker)
{
	struct ferry__node_addr a, w;
	struct ferry__cluster *c = start(&a);
	bool found = false;

	for (int i = 0; i < 200 && !found; i++) { /* the prestarted worker registers */
		found = worker_endpoint(c, &w);
		if (!found)
			usleep(20000);
	}
	ftest_assert_true(found);
	ftest_assert_str_eq(w.ip, a.ip); /* it listens on its node's ip */
	ftest_assert_errno(handshake_with(&w, "not-the-cluster-token"), -EACCES);
	ferry__cluster_stop(c);
}

static int dial(const struct ferry__node_addr *a)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(a->rt_port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(inet_pton(AF_INET, a->ip, &sin.sin_addr), 1);
	ftest_assert_ok(connect(fd, (struct sockaddr *)&sin, sizeof(sin)));
	return fd;
}

/* Closed by the server: readable with EOF (or reset). */
static bool closed_by_peer(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b;

	return poll(&p, 1, 0) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

FTEST(silent_flood_is_bounded)
{
	struct ferry__node_addr a;
	struct ferry__cluster *c = start(&a);
	int fds[FLOOD];
	unsigned closed = 0;
	long before, after;

	if (strcmp(a.ip, "127.0.0.1") != 0) {
		ferry__cluster_stop(c);
		ftest_skip("the node advertises %s, not IPv4 loopback", a.ip);
	}
	before = itest_rss_kib(getpid());
	for (int i = 0; i < FLOOD; i++)
		fds[i] = dial(&a);
	/* The oldest past the cap are closed as new ones come (no handshake is ever sent). */
	for (int tries = 0; tries < 100 && closed < FLOOD - HANDSHAKING_CAP; tries++) {
		closed = 0;
		for (int i = 0; i < FLOOD; i++)
			closed += closed_by_peer(fds[i]);
		usleep(20000);
	}
	after = itest_rss_kib(getpid());
	ftest_assert_uint_ge(closed, FLOOD - HANDSHAKING_CAP);
	/* 200 connections at most 64 of which are held, each with a small read buffer: a few MiB
	 * at most, against 16 MiB per connection if a frame buffer were taken for each. */
	ftest_assert_int_lt(after - before, 8 * 1024);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	/* The endpoint still serves: a wrong token is still answered (not a dead listener). */
	ftest_assert_errno(handshake_with(&a, "still-not-it"), -EACCES);
	ferry__cluster_stop(c);
}
