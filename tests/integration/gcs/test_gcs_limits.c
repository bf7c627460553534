/* SPDX-License-Identifier: Apache-2.0 */
/* A real ferry-gcs against peers that do not play along: a client that pipelines big KV gets
 * and never reads, a flood of connections announcing huge handshakes, and a restart on the same
 * port right after a SIGKILL. Memory is the server process's RSS; deadlines are set small. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include "common/util.h"
#include "common/wire.h"
#include "gcs_procs.h"

#define BIG_VALUE (1u << 20)

/* The resident set of @pid in KiB. */
static long rss_kib(pid_t pid)
{
	long kib = itest_rss_kib(pid);

	ftest_assert_int_gt(kib, 0);
	return kib;
}

/* A raw connection with a small receive buffer (so the kernel absorbs few replies), its
 * handshake sent, non-blocking from then on. */
static int raw_open_small(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};

	ftest_assert_int_ge(fd, 0);
	ftest_assert_ok(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_ok(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	raw_send_handshake(fd);
	ftest_assert_ok(fcntl(fd, F_SETFL, O_NONBLOCK));
	return fd;
}

/* 400 pipelined gets of the big value, as one buffer of frames. */
static uint8_t *pipelined_gets(size_t *len)
{
	struct ferry__fb_builder b = {0};
	uint8_t *all = NULL, *frame;
	size_t size;

	*len = 0;
	for (uint64_t i = 1; i <= 400; i++) {
		struct ferry__wire_gcs_kv_get m = {
			.seq = i, .key = (const uint8_t *)"big", .key_count = 3};

		ftest_assert_ok(ferry__wire_gcs_kv_get_build(&b, &m));
		ftest_assert_ok(ferry__frame_pack(FERRY__WIRE_MSG_GCS_KV_GET,
						  ferry__fb_builder_data(&b),
						  ferry__fb_builder_size(&b), &frame, &size));
		all = realloc(all, *len + size);
		ftest_assert_ptr_notnull(all);
		memcpy(all + *len, frame, size);
		*len += size;
		ferry__free(frame);
	}
	ferry__fb_builder_fini(&b);
	return all;
}

/* Has the server dropped @fd (reset or closed), without reading what it sent? */
static bool dropped(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

/*
 * 400 pipelined gets of a 1 MiB value, never read: the server holds back that client's requests
 * past its queue cap (its RSS grows by a few MiB, not 400), keeps serving another client, drops
 * the stuck one after the stall deadline, and its memory comes back.
 */
FTEST(client_that_never_reads_big_gets_is_bounded_and_dropped)
{
	const char *args[] = {"--stall-timeout-ms", "1500", NULL};
	struct gcs_proc p = (itest_asan_small_quarantine(), gcs_start(0, args));
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	char *value = malloc(BIG_VALUE);
	size_t len, done = 0, n;
	uint8_t *gets = pipelined_gets(&len);
	long base, peak = 0, after;
	uint64_t start;
	void *v;
	int fd;

	ftest_assert_ptr_notnull(value);
	memset(value, 'x', BIG_VALUE);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "big", 3, value, BIG_VALUE, false), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "small", 5, "s", 1, false), 1);
	base = rss_kib(p.pid);
	fd = raw_open_small(p.port);
	start = ferry__now_ms();
	while (!dropped(fd) && ferry__now_ms() - start < 20000) {
		ssize_t w = done < len ? send(fd, gets + done, len - done, MSG_NOSIGNAL) : 0;

		if (w > 0)
			done += (size_t)w;
		/* Another client is served all along. */
		ftest_assert_ok(ferry_gcs_kv_get(c, NULL, 0, "small", 5, &v, &n));
		ftest_assert_uint_eq(n, 1);
		ferry_gcs_free(v);
		if (rss_kib(p.pid) > peak)
			peak = rss_kib(p.pid);
		usleep(5000);
	}
	ftest_assert_true(dropped(fd));
	close(fd);
	usleep(100 * 1000);
	after = rss_kib(p.pid);
	ftest_log("RSS %ld KiB before, peak %ld, after the client left %ld", base, peak, after);
	/* Cap 8 MiB + the reply that crossed it + allocator slack; unbounded it was ~400 MiB. */
	ftest_assert_int_lt(peak - base, 48 * 1024 * ITEST_RSS_SCALE);
	if (ITEST_RSS_RETURNS)
		ftest_assert_int_lt(after - base, 4 * 1024);
	ftest_assert_ok(ferry_gcs_kv_get(c, NULL, 0, "small", 5, &v, &n));
	ferry_gcs_free(v);
	free(gets);
	free(value);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/*
 * A subscriber to the logs channel that never reads, while 64 KiB lines are published: it is
 * dropped after the stall deadline (its reconnect snapshot would cover what it missed) and the
 * server's memory stays bounded; publishing goes on.
 */
FTEST(subscriber_that_never_reads_is_dropped)
{
	const char *args[] = {"--stall-timeout-ms", "1000", NULL};
	struct gcs_proc p = (itest_asan_small_quarantine(), gcs_start(0, args));
	struct ferry_gcs_client *pub = client_for(&p, 1, TOKEN);
	struct ferry__wire_gcs_subscribe m = {.seq = 1, .channel = FERRY_GCS_CH_LOGS};
	struct ferry__fb_builder b = {0};
	static char line[64 << 10];
	struct ferry_job_id job;
	long base, peak = 0;
	uint64_t start;
	int fd;

	memset(&job, 7, sizeof(job));
	memset(line, 'l', sizeof(line));
	base = rss_kib(p.pid);
	fd = raw_open_small(p.port);
	ftest_assert_ok(fcntl(fd, F_SETFL, 0));
	ftest_assert_ok(ferry__wire_gcs_subscribe_build(&b, &m));
	raw_send(fd, FERRY__WIRE_MSG_GCS_SUBSCRIBE, ferry__fb_builder_data(&b),
		 ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	start = ferry__now_ms();
	while (!dropped(fd) && ferry__now_ms() - start < 20000) {
		for (int i = 0; i < 16; i++)
			ftest_assert_ok(ferry_gcs_log_publish(pub, &job, line, sizeof(line)));
		if (rss_kib(p.pid) > peak)
			peak = rss_kib(p.pid);
		usleep(10000);
	}
	ftest_log("waited %llu ms for the drop; RSS %ld KiB before, peak %ld",
		  (unsigned long long)(ferry__now_ms() - start), base, peak);
	ftest_assert_true(dropped(fd));
	/* Bound 8 MiB queued + 8 MiB unsent + allocator slack (18 MiB measured); unbounded, 2 s of
	 * this publishing is over 200 MiB. */
	ftest_assert_int_lt(peak - base, 32 * 1024 * ITEST_RSS_SCALE);
	close(fd);
	ftest_assert_ok(ferry_gcs_log_publish(pub, &job, "after", 5));
	ferry_gcs_client_destroy(pub);
	gcs_stop(&p, SIGTERM);
}

/*
 * 128 connections announce a 4 MiB handshake and send 256 KiB of it: each is refused at the
 * header instead of buffered before its token is checked, the server's RSS stays flat, and a
 * real client still connects.
 */
FTEST(huge_handshake_frames_are_refused_before_any_buffering)
{
	struct gcs_proc p = gcs_start(0, NULL);
	static uint8_t junk[256 << 10];
	uint8_t header[FERRY_FRAME_HEADER_SIZE];
	struct ferry_gcs_client *c;
	long base, after;
	int fds[128];

	base = rss_kib(p.pid);
	memset(junk, 0x5a, sizeof(junk));
	ferry__frame_header_encode(header, FERRY__WIRE_MSG_HANDSHAKE, 4u << 20);
	for (int i = 0; i < 128; i++) {
		fds[i] = raw_connect(p.port);
		ftest_assert_ok(fcntl(fds[i], F_SETFL, O_NONBLOCK));
		ftest_assert_int_eq(send(fds[i], header, sizeof(header), MSG_NOSIGNAL),
				    (ssize_t)sizeof(header));
		/* What the server lets in; a refused connection takes less (or resets). */
		(void)!send(fds[i], junk, sizeof(junk), MSG_NOSIGNAL);
	}
	usleep(300 * 1000);
	after = rss_kib(p.pid);
	ftest_log("RSS %ld KiB before, %ld after 128 huge handshakes", base, after);
	ftest_assert_int_lt(after - base, 16 * 1024);
	c = client_for(&p, 1, TOKEN);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, false), 1);
	ferry_gcs_client_destroy(c);
	for (int i = 0; i < 128; i++)
		close(fds[i]);
	gcs_stop(&p, SIGTERM);
}

/* Restarted on its port the moment after a SIGKILL (a client connected, so its io_uring held
 * sockets): the bind is retried, and every restart comes up at the first try. */
FTEST(restart_right_after_sigkill_binds_the_same_port)
{
	struct gcs_proc p = gcs_start(0, NULL);
	uint16_t port = p.port;

	for (int round = 0; round < 4; round++) {
		struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);

		ftest_assert_int_ge(ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, true), 0);
		gcs_stop(&p, SIGKILL);
		p = gcs_try_start(port, NULL);
		ftest_assert_uint_eq(p.port, port);
		ferry_gcs_client_destroy(c);
	}
	gcs_stop(&p, SIGTERM);
}
