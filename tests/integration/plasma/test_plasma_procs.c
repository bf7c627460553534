/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object store as it runs: a real ferry-plasma process (FERRY_PLASMA_BIN) and several
 * client processes. Puts and gets across processes (waiting for each other's seals), racing
 * creates of the same IDs, a client killed while it pins objects and writes others, a full
 * store, spilling in one process and restoring in another, malformed requests (logged, only
 * that connection closed), clients known by the kernel's word rather than the pid they claim
 * (and capped per uid), and a clean stop (socket removed, exit 0).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/plasma.h>

#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"

#define MIB (1ull << 20)
#define PROCS 4

struct store {
	pid_t pid;	/* ferry-plasma */
	char sock[256]; /* its socket */
	char log[256];	/* its stderr */
};

/* Run ferry-plasma: @extra is "spill" (spill into @spill), or options separated by spaces
 * (the paths are the test's own: no spaces in them). */
static void exec_store(const char *bin, const char *sock, const char *memory, const char *spill,
		       const char *extra)
{
	char cmd[1024], *argv[32], *save = NULL;
	bool spills = extra && !strcmp(extra, "spill");
	int n = 0;

	snprintf(cmd, sizeof(cmd), "%s --socket %s --memory %s --log info %s%s %s", bin, sock,
		 memory, spills ? "--spill-dir " : "--no-spill", spills ? spill : "",
		 extra && !spills ? extra : "");
	for (char *o = strtok_r(cmd, " ", &save); o && n < 31; o = strtok_r(NULL, " ", &save))
		argv[n++] = o;
	argv[n] = NULL;
	execv(argv[0], argv);
}

static void store_start(struct store *s, const char *memory, const char *extra)
{
	const char *bin = getenv("FERRY_PLASMA_BIN");
	char line[256], spill[256];
	int out[2], logfd;
	FILE *f;

	if (!bin)
		ftest_skip("FERRY_PLASMA_BIN is not set (run through meson test)");
	snprintf(s->sock, sizeof(s->sock), "%s/plasma.sock", ftest_tmpdir());
	snprintf(s->log, sizeof(s->log), "%s/plasma.log", ftest_tmpdir());
	snprintf(spill, sizeof(spill), "%s/spill", ftest_tmpdir());
	ftest_assert_int_eq(pipe(out), 0);
	logfd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ftest_assert_int_ge(logfd, 0);
	s->pid = fork();
	ftest_assert_int_ge(s->pid, 0);
	if (s->pid == 0) {
		dup2(out[1], 1);
		dup2(logfd, 2);
		exec_store(bin, s->sock, memory, spill, extra);
		_exit(127);
	}
	close(out[1]);
	close(logfd);
	f = fdopen(out[0], "r");
	/* Its first line says it serves; EOF means it died. */
	if (!f || !fgets(line, sizeof(line), f) || !strstr(line, "serving"))
		FTEST__FAIL("ferry-plasma did not start (see %s)", s->log);
	fclose(f);
}

static void store_stop(struct store *s)
{
	struct stat st;
	int status;

	ftest_assert_int_eq(kill(s->pid, SIGTERM), 0);
	ftest_assert_int_eq(waitpid(s->pid, &status, 0), s->pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ftest_assert_int_ne(stat(s->sock, &st), 0); /* the socket is gone */
}

static struct ferry_plasma_client *connect_to(const struct store *s)
{
	struct ferry_plasma_client *c = NULL;

	ftest_assert_ok(ferry_plasma_client_connect(s->sock, NULL, &c));
	return c;
}

static struct ferry_object_id oid(uint32_t n)
{
	struct ferry_object_id id;

	memset(id.bytes, 0x3c, sizeof(id.bytes));
	memcpy(id.bytes, &n, sizeof(n));
	return id;
}

static uint8_t byte_of(uint32_t n, uint64_t i)
{
	return (uint8_t)(n * 131u + i * 7u + 1u);
}

static void put(struct ferry_plasma_client *c, uint32_t n, uint64_t size)
{
	struct ferry_object_id id = oid(n);
	uint8_t *d;

	ftest_assert_ok(ferry_plasma_client_create(c, &id, size, &n, sizeof(n), (void **)&d));
	for (uint64_t i = 0; i < size; i++)
		d[i] = byte_of(n, i);
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
}

static void check(struct ferry_plasma_client *c, uint32_t n, uint64_t size, int64_t timeout_ms)
{
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_view v;
	const uint8_t *d;

	ftest_assert_ok(ferry_plasma_client_get(c, &id, 1, timeout_ms, &v));
	ftest_assert_uint_eq(v.data_size, size);
	d = v.data;
	for (uint64_t i = 0; i < size; i++)
		if (d[i] != byte_of(n, i))
			FTEST__FAIL("object %u byte %llu differs", n, (unsigned long long)i);
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
}

static uint64_t size_of(uint32_t n)
{
	return n % 5 == 0 ? 2 * MIB + n : 64 + n;
}

/* Run @fn(@arg, k) in PROCS children; each must exit 0. */
static void in_children(void (*fn)(const struct store *s, int k), const struct store *s)
{
	pid_t pids[PROCS];

	for (int k = 0; k < PROCS; k++) {
		pids[k] = fork();
		ftest_assert_int_ge(pids[k], 0);
		if (pids[k] == 0) {
			fn(s, k);
			_exit(0);
		}
	}
	for (int k = 0; k < PROCS; k++) {
		int status;

		ftest_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			FTEST__FAIL("client process %d failed (status 0x%x)", k, status);
	}
}

/* Each process puts its own objects and reads everybody's, waiting for those not there yet. */
static void put_then_read_all(const struct store *s, int k)
{
	struct ferry_plasma_client *c = connect_to(s);

	for (uint32_t n = (uint32_t)k; n < 40 * PROCS; n += PROCS)
		put(c, n, size_of(n));
	for (uint32_t n = 0; n < 40 * PROCS; n++)
		check(c, n, size_of(n), -1);
	ferry_plasma_client_disconnect(c);
}

FTEST(processes_put_and_read_each_others_objects)
{
	struct store s;

	store_start(&s, "256M", NULL);
	in_children(put_then_read_all, &s);
	store_stop(&s);
}

/* Every process tries to create every ID; exactly one wins each, all read the winner's. */
static void race_creates(const struct store *s, int k)
{
	struct ferry_plasma_client *c = connect_to(s);
	char path[300];
	int wins = 0, fd;

	(void)k;
	for (uint32_t n = 0; n < 200; n++) {
		struct ferry_object_id id = oid(n);
		uint8_t *d;
		int r = ferry_plasma_client_create(c, &id, size_of(n), &n, sizeof(n), (void **)&d);

		if (r == 0) {
			for (uint64_t i = 0; i < size_of(n); i++)
				d[i] = byte_of(n, i);
			ftest_assert_ok(ferry_plasma_client_seal(c, &id));
			wins++;
		} else {
			ftest_assert_errno(r, -EEXIST);
		}
		check(c, n, size_of(n), -1);
	}
	/* Report the wins through a file per process (the parent adds them up). */
	snprintf(path, sizeof(path), "%s/wins-%d", ftest_tmpdir(), k);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ftest_assert_int_eq(write(fd, &wins, sizeof(wins)), sizeof(wins));
	close(fd);
	ferry_plasma_client_disconnect(c);
}

FTEST(concurrent_creates_of_one_id_have_one_winner)
{
	struct store s;
	int total = 0;

	store_start(&s, "256M", NULL);
	in_children(race_creates, &s);
	for (int k = 0; k < PROCS; k++) {
		char path[300];
		int wins = 0, fd;

		snprintf(path, sizeof(path), "%s/wins-%d", ftest_tmpdir(), k);
		fd = open(path, O_RDONLY);
		ftest_assert_int_eq(read(fd, &wins, sizeof(wins)), sizeof(wins));
		close(fd);
		total += wins;
	}
	ftest_assert_int_eq(total, 200);
	store_stop(&s);
}

/* Poll the store's figures until @clients are connected (ours included). */
static void wait_for_clients(struct ferry_plasma_client *c, uint64_t clients)
{
	struct ferry_plasma_stats st;

	for (;;) {
		ftest_assert_ok(ferry_plasma_client_stats(c, &st));
		if (st.clients == clients + 1) /* and the store's own slot */
			return;
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
}

FTEST(a_killed_client_loses_its_pins_and_half_written_objects)
{
	struct ferry_object_id pinned = oid(1), half_small = oid(2), half_large = oid(3);
	struct ferry_plasma_stats st;
	struct ferry_plasma_client *c;
	struct store s;
	int ready[2], status;
	pid_t pid;
	char b;

	store_start(&s, "64M", NULL);
	c = connect_to(&s);
	put(c, 1, MIB);
	ftest_assert_int_eq(pipe(ready), 0);
	pid = fork();
	if (pid == 0) {
		struct ferry_plasma_client *victim = connect_to(&s);
		struct ferry_plasma_view v;
		void *d;

		ftest_assert_ok(ferry_plasma_client_get(victim, &pinned, 1, 0, &v));
		ftest_assert_ok(ferry_plasma_client_create(victim, &half_small, 100, NULL, 0, &d));
		ftest_assert_ok(
			ferry_plasma_client_create(victim, &half_large, 8 * MIB, NULL, 0, &d));
		memset(d, 1, 4 * MIB); /* half written */
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		pause(); /* killed here */
		_exit(1);
	}
	ftest_assert_int_eq(read(ready[0], &b, 1), 1);
	ftest_assert_ok(ferry_plasma_client_delete(c, &pinned, 1, NULL)); /* deferred: pinned */
	ftest_assert_ok(ferry_plasma_client_stats(c, &st));
	ftest_assert_uint_eq(st.deferred_deletes, 1);
	ftest_assert_uint_eq(st.objects, 3);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	wait_for_clients(c, 1);
	ftest_assert_ok(ferry_plasma_client_stats(c, &st));
	ftest_assert_uint_eq(st.objects, 0); /* the pin went, and the two halves */
	ftest_assert_uint_eq(st.deferred_deletes, 0);
	put(c, 2, 100); /* the IDs are free again */
	put(c, 3, 8 * MIB);
	check(c, 3, 8 * MIB, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&s);
}

FTEST(a_full_store_says_enospc)
{
	struct ferry_plasma_client *c;
	struct store s;
	void *d;
	int r = 0;

	store_start(&s, "16M", NULL);
	c = connect_to(&s);
	for (uint32_t n = 0; r == 0; n++) {
		struct ferry_object_id id = oid(n);

		r = ferry_plasma_client_create(c, &id, 3 * MIB, NULL, 0, &d);
		if (r == 0)
			ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	}
	ftest_assert_errno(r, -ENOSPC);
	ferry_plasma_client_disconnect(c);
	store_stop(&s);
}

static void spill_writer(const struct store *s, int k)
{
	struct ferry_plasma_client *c = connect_to(s);

	for (uint32_t n = (uint32_t)k; n < 48; n += PROCS)
		put(c, n, 1 * MIB + n);
	ferry_plasma_client_disconnect(c);
}

FTEST(objects_spilled_by_one_process_come_back_in_another)
{
	struct ferry_plasma_client *c;
	struct ferry_plasma_stats st;
	struct store s;

	store_start(&s, "16M", "spill");
	in_children(spill_writer, &s); /* 48 MiB into 16 */
	c = connect_to(&s);
	for (uint32_t n = 0; n < 48; n++)
		check(c, n, 1 * MIB + n, 0);
	ftest_assert_ok(ferry_plasma_client_stats(c, &st));
	ftest_assert_uint_gt(st.spilled_total_objects, 0);
	ftest_assert_uint_gt(st.restored_objects, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&s);
}

static int log_has(const struct store *s, const char *what)
{
	char line[512];
	FILE *f = fopen(s->log, "r");
	int found = 0;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

FTEST(a_malformed_request_is_logged_and_closes_only_its_connection)
{
	static const uint8_t junk[] = {0xfe, 1, 36, 0, 8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct ferry_plasma_client *c;
	struct store s;
	char buf[64];
	int fd;

	store_start(&s, "64M", NULL);
	c = connect_to(&s);
	put(c, 1, 1000);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ftest_assert_uint_lt(strlen(s.sock), sizeof(a.sun_path));
	memcpy(a.sun_path, s.sock, strlen(s.sock) + 1);
	ftest_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	/* A well-framed PlasmaCreate (type 36) whose 8 payload bytes are no FlatBuffer. */
	ftest_assert_int_eq(write(fd, junk, sizeof(junk)), sizeof(junk));
	ftest_assert_int_le(read(fd, buf, sizeof(buf)), 0); /* closed, no reply */
	close(fd);
	ftest_assert_true(log_has(&s, "malformed PlasmaCreate"));
	check(c, 1, 1000, 0);
	put(c, 2, 3 * MIB);
	check(c, 2, 3 * MIB, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&s);
}

/* ---- who the clients are ---- */

static int raw_connect(const struct store *s)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* PlasmaConnect claiming @pid; the reply is read and dropped (its fds with it). Returns 0 or
 * -1 (no test asserts: it runs in a child). */
static int send_forged_connect(int fd, int32_t pid)
{
	struct ferry__wire_plasma_connect m = {.seq = 1, .pid = pid, .name = "forger"};
	struct ferry__fb_builder b = {0};
	const uint8_t *frame;
	uint8_t reply[256];
	size_t size;
	int r = -1;

	if (ferry__wire_plasma_connect_build(&b, &m) == 0 &&
	    ferry__frame_finish(&b, FERRY__WIRE_MSG_PLASMA_CONNECT, &frame, &size) == 0 &&
	    write(fd, frame, size) == (ssize_t)size && read(fd, reply, sizeof(reply)) > 0)
		r = 0;
	ferry__fb_builder_fini(&b);
	return r;
}

/*
 * A client that claims to be a live process (here the test itself) and is then killed: its
 * slot comes back because the store watches the process the kernel named. The store has one
 * client slot, so the next client needs it; the log names the real pid.
 */
FTEST(a_killed_client_that_claimed_a_live_pid_is_cleaned_up)
{
	struct ferry_plasma_client *c;
	struct store s;
	char line[64];
	int ready[2], status;
	pid_t pid;

	store_start(&s, "16M", "--max-clients 1");
	ftest_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = raw_connect(&s);

		if (fd < 0 || send_forged_connect(fd, (int32_t)getppid()) < 0 ||
		    write(ready[1], "x", 1) != 1)
			_exit(1);
		pause(); /* killed here, still connected */
		_exit(1);
	}
	ftest_assert_int_eq(read(ready[0], line, 1), 1);
	kill(pid, SIGKILL);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	c = connect_to(&s);
	put(c, 1, 1000);
	check(c, 1, 1000, 0);
	ferry_plasma_client_disconnect(c);
	snprintf(line, sizeof(line), "client pid %d uid", (int)pid);
	ftest_assert_true(log_has(&s, line));
	close(ready[0]);
	close(ready[1]);
	store_stop(&s);
}

/* --max-clients-per-uid: uid nobody gets one slot, a second connect is refused and logged. */
FTEST(max_clients_per_uid_caps_one_user)
{
	struct store s;
	pid_t pid;
	int status;

	if (geteuid() != 0)
		ftest_skip("needs root to run a client as uid nobody");
	store_start(&s, "16M", "--max-clients-per-uid 1");
	ftest_assert_int_eq(chmod(ftest_tmpdir(), 0711), 0);
	ftest_assert_int_eq(chmod(s.sock, 0666), 0);
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct ferry_plasma_client *a, *b;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		if (ferry_plasma_client_connect(s.sock, NULL, &a) < 0)
			_exit(3);
		_exit(ferry_plasma_client_connect(s.sock, NULL, &b) == -EUSERS ? 0 : 4);
	}
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
	ftest_assert_true(log_has(&s, "uid 65534 holds 1 client slots, its cap"));
	store_stop(&s);
}
