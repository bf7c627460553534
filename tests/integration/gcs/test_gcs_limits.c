/* SPDX-License-Identifier: Apache-2.0 */
/* A real ferry-gcs against peers that do not play along: a client that pipelines big KV gets
 * and never reads, one that floods subscribes past its cap, a flood of connections announcing
 * huge handshakes, and a restart on the same port right after a SIGKILL. Memory is the server
 * process's RSS; deadlines are set small. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>

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

/* ---- a subscription flood ---- */

#define SUB_CAP 10000	 /* ferry-gcs's subscriptions per connection (server.h default) */
#define FLOOD_KEYS 10100 /* keys a flooder asks for: 101 past the cap with its whole scope */
#define FLOOD_CHUNK 500	 /* requests sent before their replies are read */

/* A raw connection that pipelines subscribes and unsubscribes in chunks (so neither side's
 * socket fills while the other waits), counting its replies by status. */
struct flood {
	int fd;
	struct ferry__frame_parser parser;
	uint64_t seq;	 /* last request's */
	uint8_t *out;	 /* the chunk's frames */
	size_t len;	 /* ... their bytes */
	unsigned queued; /* ... how many */
	unsigned ok;	 /* replies 0 */
	unsigned nospc;	 /* -ENOSPC */
	unsigned noent;	 /* -ENOENT */
	unsigned other;	 /* anything else */
};

/* The next GcsReply's status; publishes to the flooder's own scopes are skipped. */
static int flood_reply(struct flood *f)
{
	struct ferry__frame fr;

	for (;;) {
		uint8_t *space;
		size_t size;
		ssize_t n;

		while (ferry__frame_parser_next(&f->parser, &fr) == 1)
			if (fr.type == FERRY__WIRE_MSG_GCS_REPLY)
				return ferry__wire_gcs_reply_status(
					ferry__wire_gcs_reply_root_verified(fr.payload));
		ftest_assert_ok(ferry__frame_parser_space(&f->parser, &space, &size));
		n = read(f->fd, space, size);
		ftest_assert_int_gt(n, 0);
		ferry__frame_parser_commit(&f->parser, (size_t)n);
	}
}

static void flood_flush(struct flood *f)
{
	ftest_write_all(f->fd, f->out, f->len);
	f->len = 0;
	for (; f->queued; f->queued--) {
		int status = flood_reply(f);

		if (status == 0)
			f->ok++;
		else if (status == -ENOSPC)
			f->nospc++;
		else if (status == -ENOENT)
			f->noent++;
		else
			f->other++;
	}
}

/* Subscribe (or unsubscribe) the logs channel's key @key, or the whole channel (@key 0). */
static void flood_add(struct flood *f, bool unsub, uint32_t key)
{
	struct ferry__fb_builder b = {0};
	const uint8_t *k = key ? (const uint8_t *)&key : NULL;
	size_t klen = key ? sizeof(key) : 0, size;
	uint16_t type;
	uint8_t *frame;

	if (unsub) {
		struct ferry__wire_gcs_unsubscribe m = {
			.seq = ++f->seq, .channel = FERRY_GCS_CH_LOGS, .key = k, .key_count = klen};

		type = FERRY__WIRE_MSG_GCS_UNSUBSCRIBE;
		ftest_assert_ok(ferry__wire_gcs_unsubscribe_build(&b, &m));
	} else {
		struct ferry__wire_gcs_subscribe m = {
			.seq = ++f->seq, .channel = FERRY_GCS_CH_LOGS, .key = k, .key_count = klen};

		type = FERRY__WIRE_MSG_GCS_SUBSCRIBE;
		ftest_assert_ok(ferry__wire_gcs_subscribe_build(&b, &m));
	}
	ftest_assert_ok(ferry__frame_pack(type, ferry__fb_builder_data(&b),
					  ferry__fb_builder_size(&b), &frame, &size));
	ferry__fb_builder_fini(&b);
	f->out = realloc(f->out, f->len + size);
	ftest_assert_ptr_notnull(f->out);
	memcpy(f->out + f->len, frame, size);
	f->len += size;
	ferry__free(frame);
	if (++f->queued == FLOOD_CHUNK)
		flood_flush(f);
}

/* Keys @first..@last, subscribed or unsubscribed. */
static void flood_keys(struct flood *f, bool unsub, uint32_t first, uint32_t last)
{
	for (uint32_t k = first; k <= last; k++)
		flood_add(f, unsub, k);
	flood_flush(f);
}

static void flood_counts_expect(struct flood *f, unsigned ok, unsigned nospc, unsigned noent)
{
	ftest_assert_uint_eq(f->ok, ok);
	ftest_assert_uint_eq(f->nospc, nospc);
	ftest_assert_uint_eq(f->noent, noent);
	ftest_assert_uint_eq(f->other, 0);
	f->ok = f->nospc = f->noent = 0;
}

static void on_log_line(void *arg, const struct ferry_gcs_event *ev)
{
	if (ev->kind == FERRY_GCS_EVENT_DELTA)
		atomic_fetch_add((atomic_uint *)arg, 1);
}

/*
 * One connection subscribes the whole logs channel, then keys of it past its subscription cap,
 * the same scopes again, and unsubscribes them all; three rounds. The cap holds under the
 * whole scope (keys count whatever covers them): each round gets exactly SUB_CAP in, the rest
 * -ENOSPC (logged once per connection, not per refusal), and all back once unsubscribed. The
 * server's memory at the cap does not grow from round to round, and another client gets KV
 * service and log lines all along.
 */
FTEST(a_subscription_flood_under_a_whole_scope_is_capped)
{
	struct gcs_proc p = (itest_asan_small_quarantine(), gcs_start(0, NULL));
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct timeval tv = {20, 0};
	struct flood f = {0};
	struct ferry_job_id job;
	atomic_uint heard = 0;
	long base, at_cap[3];
	void *v;
	size_t n;

	memset(&job, 9, sizeof(job));
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_LOGS, job.bytes, sizeof(job.bytes),
					    on_log_line, &heard));
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, false), 1);
	base = rss_kib(p.pid);
	f.fd = raw_connect(p.port);
	ftest_assert_ok(setsockopt(f.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	ferry__frame_parser_init(&f.parser, 0);
	raw_send_handshake(f.fd);
	for (int round = 0; round < 3; round++) {
		flood_add(&f, false, 0);
		flood_keys(&f, false, 1, FLOOD_KEYS);
		flood_counts_expect(&f, SUB_CAP, FLOOD_KEYS + 1 - SUB_CAP, 0);
		at_cap[round] = rss_kib(p.pid);
		flood_add(&f, false, 0); /* already there: 0, nothing new */
		flood_keys(&f, false, 1, 100);
		flood_counts_expect(&f, 101, 0, 0);
		/* Served while the flooder sits at its cap. */
		ftest_assert_ok(ferry_gcs_kv_get(c, NULL, 0, "k", 1, &v, &n));
		ftest_assert_uint_eq(n, 1);
		ferry_gcs_free(v);
		ftest_assert_ok(ferry_gcs_log_publish(c, &job, "x", 1));
		for (int i = 0; i < 2000 && atomic_load(&heard) < (unsigned)round + 1; i++)
			usleep(5000);
		ftest_assert_uint_eq(atomic_load(&heard), round + 1);
		flood_keys(&f, true, 1, FLOOD_KEYS);
		flood_add(&f, true, 0);
		flood_flush(&f);
		flood_counts_expect(&f, SUB_CAP, 0, FLOOD_KEYS + 1 - SUB_CAP);
	}
	ftest_log("RSS %ld KiB before, at the cap %ld, %ld, %ld", base, at_cap[0], at_cap[1],
		  at_cap[2]);
	/* 10,000 scopes are a few MiB; refused ones cost nothing, so later rounds add nothing. */
	ftest_assert_int_lt(at_cap[0] - base, 16 * 1024 * ITEST_RSS_SCALE);
	ftest_assert_int_lt(at_cap[2] - at_cap[0], 4 * 1024 * ITEST_RSS_SCALE);
	ferry__frame_parser_fini(&f.parser);
	free(f.out);
	close(f.fd);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "k2", 2, "v", 1, false), 1);
	ferry_gcs_client_destroy(c);
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

/* ---- limits set on the command line ---- */

/* ferry-gcs refuses @flag @value before it starts anything: exit 2, the flag and the reason
 * named. */
static void flag_refused(const char *flag, const char *value, const char *reason)
{
	const char *bin = getenv("FERRY_GCS_BIN");
	char cmd[1024], out[2048];
	int code;

	if (!bin)
		ftest_skip("FERRY_GCS_BIN not set");
	/* timeout: a value taken by mistake starts a server that would never exit. */
	snprintf(cmd, sizeof(cmd), "timeout 10 '%s' --port 0 --token-file '%s' %s '%s' 2>&1", bin,
		 token_file(), flag, value);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("%s '%s' -> %d: %s", flag, value, code, out);
	ftest_assert_int_eq(code, 2);
	ftest_assert_ptr_notnull(strstr(out, flag));
	ftest_assert_ptr_notnull(strstr(out, reason));
}

static void subscribe_job(struct ferry_gcs_client *c, uint8_t job_byte, int expected)
{
	struct ferry_job_id job;

	memset(&job, job_byte, sizeof(job));
	ftest_assert_errno(ferry_gcs_subscribe(c, FERRY_GCS_CH_LOGS, job.bytes, sizeof(job.bytes),
					       on_log_line, NULL),
			   expected);
}

/*
 * ferry-gcs --max-subscriptions 3: a connection's fourth scope gets -ENOSPC while another
 * connection still has its own three, and an unsubscribe makes room again. Values that are not
 * a count from 1 up are refused with the reason.
 */
FTEST(max_subscriptions_flag_caps_each_connection)
{
	const char *const extra[] = {"--max-subscriptions", "3", NULL};
	struct gcs_proc p = gcs_start(0, extra);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN), *other = client_for(&p, 1, TOKEN);
	struct ferry_job_id first;

	for (uint8_t k = 1; k <= 3; k++)
		subscribe_job(c, k, 0);
	subscribe_job(c, 4, -ENOSPC);
	subscribe_job(c, 5, -ENOSPC);
	for (uint8_t k = 1; k <= 3; k++)
		subscribe_job(other, k, 0);
	memset(&first, 1, sizeof(first));
	ftest_assert_ok(
		ferry_gcs_unsubscribe(c, FERRY_GCS_CH_LOGS, first.bytes, sizeof(first.bytes)));
	subscribe_job(c, 4, 0);
	subscribe_job(c, 5, -ENOSPC);
	ferry_gcs_client_destroy(other);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);

	flag_refused("--max-subscriptions", "0", "a count from 1 to");
	flag_refused("--max-subscriptions", "-1", "a count from 1 to");
	flag_refused("--max-subscriptions", "many", "a count from 1 to");
	flag_refused("--max-subscriptions", "16777217", "a count from 1 to");
}

/* A client of @p with @token; its connect's result, *@out set on success, *@ms its time. */
static int try_client(const struct gcs_proc *p, const char *token, struct ferry_gcs_client **out,
		      uint64_t *ms)
{
	char addr[64];
	const char *list[1] = {addr};
	struct ferry_gcs_client_opts o = {0};
	uint64_t start = ferry__now_ms();
	int ret;

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", p->port);
	o.addresses = list;
	o.naddresses = 1;
	o.token = token;
	o.token_len = strlen(token);
	o.timeout_ms = 5000;
	ret = ferry_gcs_client_connect(&o, out);
	*ms = ferry__now_ms() - start;
	return ret;
}

/* A KV round trip through @c. */
static void kv_served(struct ferry_gcs_client *c)
{
	void *v;
	size_t n;

	ftest_assert_ok(ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, true));
	ftest_assert_ok(ferry_gcs_kv_get(c, NULL, 0, "k", 1, &v, &n));
	ftest_assert_uint_eq(n, 1);
	ferry_gcs_free(v);
}

/* A newcomer gets in once the server has seen a client leave (its close is asynchronous). */
static struct ferry_gcs_client *client_once_room(const struct gcs_proc *p)
{
	struct ferry_gcs_client *c = NULL;
	uint64_t ms;
	int ret = -EUSERS;

	for (int i = 0; i < 100 && ret == -EUSERS; i++) {
		ret = try_client(p, TOKEN, &c, &ms);
		if (ret == -EUSERS)
			usleep(20 * 1000);
	}
	ftest_assert_ok(ret);
	return c;
}

/*
 * ferry-gcs --max-clients 4 and six clients: the two extra ones are refused at once (-EUSERS,
 * well before their 5 s connect timeout, and the client says why), while the four are served;
 * a wrong token is still told so when the server is full. Once two leave, two newcomers get in
 * and a third is refused again. Values that are not a count from 1 up are refused.
 */
FTEST(max_clients_flag_refuses_the_extra_clients)
{
	const char *const extra[] = {"--max-clients", "4", NULL};
	struct gcs_proc p = gcs_start(0, extra);
	struct ferry_gcs_client *in[4], *late = NULL;
	uint64_t ms;

	for (int i = 0; i < 4; i++)
		in[i] = client_for(&p, 1, TOKEN);
	ftest_log_capture_start();
	for (int i = 0; i < 2; i++) {
		ftest_assert_errno(try_client(&p, TOKEN, &late, &ms), -EUSERS);
		ftest_log("refused in %llu ms", (unsigned long long)ms);
		ftest_assert_uint_lt(ms, 2000);
	}
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "ferry-gcs --max-clients"));
	ftest_log_capture_stop();
	ftest_assert_errno(try_client(&p, "not-the-token", &late, &ms), -EACCES);
	for (int i = 0; i < 4; i++)
		kv_served(in[i]);
	ferry_gcs_client_destroy(in[0]);
	ferry_gcs_client_destroy(in[1]);
	in[0] = client_once_room(&p);
	in[1] = client_once_room(&p);
	ftest_assert_errno(try_client(&p, TOKEN, &late, &ms), -EUSERS);
	for (int i = 0; i < 4; i++) {
		kv_served(in[i]);
		ferry_gcs_client_destroy(in[i]);
	}
	gcs_stop(&p, SIGTERM);

	flag_refused("--max-clients", "0", "a count from 1 to");
	flag_refused("--max-clients", "lots", "a count from 1 to");
	flag_refused("--max-clients", "", "a count from 1 to");
}
