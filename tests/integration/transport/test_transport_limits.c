/* SPDX-License-Identifier: Apache-2.0 */
/* A ferry-node's pull listener against a puller that pipelines PullRequests and never reads
 * the replies: the node's memory stays bounded (the replies' copies wait up to the cap, then
 * the requests wait), and comes back when the puller leaves. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/wire.h"
#include "transport/objmgr_int.h"
#include "transport/tcp_int.h"
#include "ftest.h"
#include "tests/integration/procs.h"
#include "transport_util.h"

#define OBJECT (1u << 20)
#define REQUESTS 300

static void send_all(int fd, const void *data, size_t len)
{
	ftest_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* A one-socket TCP engine peer that passed the token handshake. */
static int engine_peer(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	uint8_t hdr[FERRY__TCP_HDR_SIZE], ack[FERRY__TCP_ACK_MAX];
	struct ferry__tcp_hdr h;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;
	uint8_t *hello;
	size_t size;

	ftest_assert_int_ge(fd, 0);
	ftest_assert_ok(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_ok(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	ftest_assert_ok(
		ferry__tcp_hello_frame(TT_TOKEN, strlen(TT_TOKEN), 0x5eed, 0, 1, &hello, &size));
	send_all(fd, hello, size);
	ferry__free(hello);
	ftest_assert_int_eq(recv(fd, hdr, sizeof(hdr), MSG_WAITALL), (ssize_t)sizeof(hdr));
	ftest_assert_ok(ferry__tcp_hdr_decode(hdr, 1024, &h));
	ftest_assert_int_eq(h.kind, FERRY__TCP_ACK);
	ftest_assert_int_eq(recv(fd, ack, h.len, MSG_WAITALL), (ssize_t)h.len);
	ftest_assert_ok(ferry__tcp_ack_parse(ack, h.len));
	return fd;
}

/* REQUESTS inline PullRequests for @id, each a control frame, in one buffer. */
static uint8_t *pull_requests(const struct ferry_object_id *id, size_t *len)
{
	struct ferry__fb_builder b = {0};
	uint8_t *all = NULL;

	*len = 0;
	for (uint64_t i = 0; i < REQUESTS; i++) {
		struct ferry__wire_pull_request m = {
			.xfer = i + 1, .object_id = *id, .len = OBJECT, .want_inline = true};
		size_t msg_len;
		void *msg;

		ftest_assert_ok(ferry__wire_pull_request_build(&b, &m));
		msg = ferry__objmgr_wrap(&b, FERRY__WIRE_MSG_PULL_REQUEST, &msg_len);
		ftest_assert_ptr_notnull(msg);
		all = realloc(all, *len + msg_len);
		ftest_assert_ptr_notnull(all);
		memcpy(all + *len, msg, msg_len); /* a frame already */
		*len += msg_len;
	}
	ferry__fb_builder_fini(&b);
	return all;
}

FTEST(puller_that_never_reads_keeps_a_node_bounded)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a =
		(itest_asan_small_quarantine(), tt_node_proc_start(gcs.port, "64M", "a"));
	struct ferry_object_id id;
	const char *tcp = strstr(a.address, "tcp=");
	unsigned port = 0;
	size_t len, done = 0;
	uint8_t *reqs;
	long base, peak = 0, after;
	int fd;

	ftest_assert_ptr_notnull(tcp);
	ftest_assert_int_eq(sscanf(tcp, "tcp=%u", &port), 1);
	ferry_object_id_random(&id);
	tt_put(a.socket, &id, OBJECT, 3);
	reqs = pull_requests(&id, &len);
	base = itest_rss_kib(a.pid);
	fd = engine_peer((uint16_t)port);
	ftest_assert_ok(fcntl(fd, F_SETFL, O_NONBLOCK));
	/* Two seconds of pipelining without reading a byte. */
	for (int i = 0; i < 400; i++) {
		ssize_t n = done < len ? send(fd, reqs + done, len - done, MSG_NOSIGNAL) : 0;

		if (n > 0)
			done += (size_t)n;
		if (itest_rss_kib(a.pid) > peak)
			peak = itest_rss_kib(a.pid);
		usleep(5000);
	}
	close(fd);
	usleep(300 * 1000);
	after = itest_rss_kib(a.pid);
	ftest_log("node RSS %ld KiB before, peak %ld, after the puller left %ld; %zu of %zu "
		  "request bytes taken",
		  base, peak, after, done, len);
	/* Cap 8 MiB of replies + one reply + slack; unbounded it was a reply per request. */
	ftest_assert_int_lt(peak - base, 32 * 1024 * ITEST_RSS_SCALE);
	ftest_assert_int_lt(after - base, 32 * 1024 * ITEST_RSS_SCALE);
	free(reqs);
	tt_proc_signal(&a, SIGTERM);
	tt_proc_signal(&gcs, SIGTERM);
}
