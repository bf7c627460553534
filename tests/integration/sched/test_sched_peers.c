/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched against peers that do not play along: a holder of the cluster token that sends
 * forged group summaries (members no GCS knows, a new group name each time) or opens
 * connections by the hundred. Memory is the scheduler process's RSS; service is a SchedPlace
 * answered on another connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/frame.h"
#include "common/wire.h"
#include "sched/client.h"
#include "sched/proto.h"
#include "tests/harness/ftest.h"
#include "tests/integration/gcs/gcs_procs.h"
#include "tests/integration/procs.h"
#include "tests/integration/sched/sched_procs.h"

#define UNIT FERRY_GCS_RESOURCE_UNIT

static const char *const long_deadline[] = {"--node-deadline-ms", "600000", NULL};

struct cluster {
	struct gcs_proc gcs;		/* ferry-gcs */
	struct ferry_gcs_client *admin; /* registers the node */
	struct ferry_node_id node;	/* a CPU node, 4 CPUs free */
	struct sched_proc sched;	/* ferry-sched, the global level */
};

static void cluster_start(struct cluster *c, const char *const *sched_extra)
{
	struct ferry_gcs_node_info info = {0};
	struct ferry_gcs_resource_load res = {
		.name = "CPU", .total = 4 * UNIT, .available = 4 * UNIT};
	struct ferry_gcs_node_load load = {.version = 1, .nresources = 1, .resources = &res};

	itest_asan_small_quarantine();
	c->gcs = gcs_start(0, long_deadline);
	c->admin = client_for(&c->gcs, 1, TOKEN);
	ferry_id_random(c->node.bytes, sizeof(c->node.bytes));
	info.id = c->node;
	info.address = "ip=127.0.0.1;tcp=1001";
	info.cpu = 4;
	info.state = FERRY_GCS_NODE_ALIVE;
	ftest_assert_int_ge(ferry_gcs_node_register(c->admin, &info), 0);
	load.id = c->node;
	ftest_assert_int_eq(ferry_gcs_node_report_load(c->admin, &load), 1);
	c->sched = sched_start_with(c->gcs.port, token_file(), sched_extra);
}

static void cluster_stop(struct cluster *c)
{
	sched_stop(&c->sched, SIGTERM);
	ferry_gcs_client_destroy(c->admin);
	gcs_stop(&c->gcs, SIGTERM);
}

static long rss_kib(pid_t pid)
{
	long kib = itest_rss_kib(pid);

	ftest_assert_int_gt(kib, 0);
	return kib;
}

/* Read one whole frame from blocking @fd into @buf: its type, or -1 at EOF or an error. */
static int read_frame(int fd, uint8_t *buf, size_t size, size_t *len)
{
	struct ferry__frame_header h;
	size_t got = 0;

	while (got < FERRY_FRAME_HEADER_SIZE) {
		ssize_t r = read(fd, buf + got, FERRY_FRAME_HEADER_SIZE - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	ftest_assert_ok(ferry__frame_header_decode(buf, (uint32_t)size, &h));
	for (got = 0; got < h.length;) {
		ssize_t r = read(fd, buf + got, h.length - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	*len = h.length;
	return h.type;
}

/* A connection past its handshake (the reply read), blocking, with a 10 s receive guard. */
static int open_peer(uint16_t port)
{
	struct timeval tv = {.tv_sec = 10};
	static uint8_t buf[4096];
	size_t len;
	int fd = raw_connect(port);

	ftest_assert_ok(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	raw_send_handshake(fd);
	ftest_assert_int_eq(read_frame(fd, buf, sizeof(buf), &len),
			    FERRY__WIRE_MSG_HANDSHAKE_REPLY);
	return fd;
}

/* One CPU asked for on @fd: the reply's status (retried while the view is partial). */
static int place_raw(int fd)
{
	struct ferry__res cpu = {"CPU", UNIT};
	struct ferry__sched_place_req q = {.res = &cpu, .nres = 1};
	const struct ferry__sched_place_req *items[] = {&q};
	struct ferry_node_id origin = {{7}};
	struct ferry__sched_result r = {.status = -1000};
	struct ferry__fb_builder b = {0};
	static uint8_t buf[1 << 16];
	uint64_t id = 1;
	size_t len;

	for (int tries = 0; tries < 100; tries++, id++) {
		ftest_assert_ok(ferry__sched_place_build(&b, &origin, items, &id, 1));
		raw_send(fd, FERRY__WIRE_MSG_SCHED_PLACE, ferry__fb_builder_data(&b),
			 ferry__fb_builder_size(&b));
		ftest_assert_int_eq(read_frame(fd, buf, sizeof(buf), &len),
				    FERRY__WIRE_MSG_SCHED_PLACE_REPLY);
		ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE_REPLY, buf, len));
		ftest_assert_int_eq(ferry__sched_reply_count(buf, len), 1);
		ftest_assert_ok(ferry__sched_reply_result(buf, 0, &r));
		if (r.status != -EAGAIN)
			break;
		usleep(50 * 1000);
	}
	ferry__fb_builder_fini(&b);
	return r.status;
}

/* A SchedGroupLoad for group @name with no resources and @n members with random IDs. */
static void send_group(int fd, const char *name, size_t n)
{
	static struct ferry_node_id members[FERRY__SCHED_GROUP_MEMBERS_MAX];
	const char *names[FERRY__SCHED_KINDS] = {"CPU"};
	struct ferry__sched_load load = {.version = 1};
	struct ferry__fb_builder b = {0};

	for (size_t i = 0; i < n; i++)
		ferry_id_random(members[i].bytes, sizeof(members[i].bytes));
	ftest_assert_ok(ferry__sched_group_build(&b, name, &load, names, members, n));
	raw_send(fd, FERRY__WIRE_MSG_SCHED_GROUP_LOAD, ferry__fb_builder_data(&b),
		 ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
}

/*
 * A summary's members are nodes the GCS knows: 32 forged summaries of 65,536 members each, no
 * two alike, do not give the global level two million entries (each a child of its level).
 */
FTEST(group_members_no_gcs_knows_take_no_memory)
{
	struct cluster c;
	long base, after;
	int fd;

	cluster_start(&c, NULL);
	fd = open_peer(c.sched.port);
	ftest_assert_int_eq(place_raw(fd), 0);
	base = rss_kib(c.sched.pid);
	for (int i = 0; i < 32; i++)
		send_group(fd, "forged", FERRY__SCHED_GROUP_MEMBERS_MAX);
	/* Answered after the summaries, on the same connection: they were all read. */
	ftest_assert_int_eq(place_raw(fd), 0);
	after = rss_kib(c.sched.pid);
	ftest_log("RSS %ld KiB before, %ld after 32 summaries of 65,536 members", base, after);
	ftest_assert_int_lt(after - base, 16 * 1024 * ITEST_RSS_SCALE);
	close(fd);
	cluster_stop(&c);
}
/*
 * Group names are capped: 100,000 summaries, each naming a new group, leave the scheduler's
 * memory bounded, one line in its log, and a node's request answered.
 */
FTEST(new_group_names_past_the_cap_are_ignored)
{
	struct cluster c;
	long base, after;
	char name[32];
	int fd;

	cluster_start(&c, NULL);
	fd = open_peer(c.sched.port);
	ftest_assert_int_eq(place_raw(fd), 0);
	base = rss_kib(c.sched.pid);
	for (int i = 0; i < 100000; i++) {
		snprintf(name, sizeof(name), "g%d", i);
		send_group(fd, name, 0);
	}
	ftest_assert_int_eq(place_raw(fd), 0);
	after = rss_kib(c.sched.pid);
	ftest_log("RSS %ld KiB before, %ld after 100,000 group names", base, after);
	ftest_assert_int_lt(after - base, 16 * 1024 * ITEST_RSS_SCALE);
	close(fd);
	cluster_stop(&c);
}

/* A ferry-sched whose open-file limit is 256 (sh's ulimit, soft and hard). */
static struct sched_proc sched_start_low_fds(uint16_t gcs_port)
{
	const char *bin = getenv("FERRY_SCHED_BIN");
	char cmd[1024], line[160];
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	struct sched_proc p = {0};

	if (!bin)
		ftest_skip("FERRY_SCHED_BIN not set");
	snprintf(cmd, sizeof(cmd),
		 "ulimit -n 256 && exec %s --gcs 127.0.0.1:%u --token-file %s --ip 127.0.0.1 "
		 "--port 0",
		 bin, gcs_port, token_file());
	p.pid = itest_spawn(argv, line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-sched listening on port %hu", &p.port), 1);
	return p;
}

/* A handshake on a new connection to @port: its reply's status (0 admitted, -EUSERS, ...). */
static int handshake_status(uint16_t port, int *fd)
{
	struct timeval tv = {.tv_sec = 10};
	static uint8_t buf[4096];
	struct ferry__wire_handshake_reply_view v;
	size_t len;

	*fd = raw_connect(port);
	ftest_assert_ok(setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	raw_send_handshake(*fd);
	ftest_assert_int_eq(read_frame(*fd, buf, sizeof(buf), &len),
			    FERRY__WIRE_MSG_HANDSHAKE_REPLY);
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_HANDSHAKE_REPLY, buf, len));
	v = ferry__wire_handshake_reply_root_verified(buf);
	return ferry__wire_handshake_reply_status(v);
}

/*
 * A token holder that opens 400 connections to a scheduler whose open-file limit is 256 and
 * keeps them: past what the limit leaves room for, a handshake is refused with -EUSERS, so
 * accept never meets EMFILE (which left every newcomer, nodes included, unanswered), and once
 * some of them leave a node gets in and is served.
 */
FTEST(a_connection_flood_does_not_lock_nodes_out)
{
	struct cluster c;
	int fds[400], refused = 0, fd;

	cluster_start(&c, NULL);
	sched_stop(&c.sched, SIGTERM);
	c.sched = sched_start_low_fds(c.gcs.port);
	/* Each is answered, admitted or refused: none waits behind a full table. */
	for (int i = 0; i < 400; i++)
		refused += handshake_status(c.sched.port, &fds[i]) == -EUSERS;
	ftest_log("%d of 400 connections refused", refused);
	ftest_assert_int_gt(refused, 0);
	/* One of those admitted stays; the others leave and a newcomer gets in. */
	for (int i = 0; i < 400 - refused - 1; i++)
		close(fds[i]);
	usleep(200 * 1000);
	fd = open_peer(c.sched.port);
	ftest_assert_int_eq(place_raw(fd), 0);
	close(fd);
	for (int i = 400 - refused - 1; i < 400; i++)
		close(fds[i]);
	cluster_stop(&c);
}

/* `ferry-sched --max-clients 3`: the fourth and fifth connections are refused (-EUSERS), the
 * three in are served; one leaves and a newcomer gets in. A bad value is refused at start. */
FTEST(max_clients_flag_refuses_the_extra_clients)
{
	const char *bin = getenv("FERRY_SCHED_BIN");
	const char *extra[] = {"--max-clients", "3", NULL};
	char cmd[1024];
	struct cluster c;
	int fds[5], fd;

	cluster_start(&c, NULL);
	sched_stop(&c.sched, SIGTERM);
	c.sched = sched_start_with(c.gcs.port, token_file(), extra);
	for (int i = 0; i < 5; i++)
		ftest_assert_int_eq(handshake_status(c.sched.port, &fds[i]), i < 3 ? 0 : -EUSERS);
	close(fds[0]);
	usleep(200 * 1000);
	fd = open_peer(c.sched.port);
	ftest_assert_int_eq(place_raw(fd), 0);
	close(fd);
	for (int i = 1; i < 5; i++)
		close(fds[i]);
	cluster_stop(&c);
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof(cmd),
			 "%s --gcs 127.0.0.1:1 --token-file %s --max-clients %s >/dev/null 2>&1",
			 bin, token_file(), i ? "lots" : "0");
		ftest_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
	}
}
