/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Owners and borrowers through the public API, on the local cluster ferry_init starts: the
 * driver gets an object that lives only in a worker's memory store (its owner sends it), waits
 * at the owner for one still pending (ferry_get and ferry_wait), and gets -EOWNERDEAD naming
 * the owner once that worker is killed (never a hang); a task passes a ref it borrowed on to a
 * subtask; a ref given to a task and kept there with ferry_ref_dup keeps the driver's object
 * alive after the driver dropped its own, until the borrower dies; so does a ref stored in
 * another object (ferry_put_refs), while that object lives or a borrower keeps it. The job is
 * tests/unit/runtime/job_owner.c (lend, lend_pending, pass_on, stash). An owner that answers
 * half a reply cannot hold a ferry_wait past its timeout. Environment (meson.build):
 * FERRY_WORKER_EXE, FERRY_TEST_JOB.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"

struct lent {
	struct ferry_ref ref;
	int32_t pid;
};

static void init_job(void)
{
	ftest_runtime_init(NULL, 1);
}

/* @fn(@x)'s return, @len bytes, into @out. */
static void call(const char *fn, const void *x, size_t xlen, void *out, size_t len)
{
	struct ferry_arg a = {.data = x, .len = xlen};
	struct ferry_ref r;
	struct ferry_view v;
	int ret;

	ftest_assert_ok(ferry_submit(fn, &a, 1, NULL, &r));
	ret = ferry_get(&r, 60000, &v);
	if (ret < 0)
		ftest_log("%s: %s: %s", fn, ferry_strerror(ret), v.error);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.len, len);
	memcpy(out, v.data, len);
	ferry_release(&v);
	ferry_ref_drop(&r);
}

/* @r's int64; @r stays the caller's (the harness's get drops a count of its own). */
static int64_t get_int64(const struct ferry_ref *r, int64_t timeout_ms)
{
	struct ferry_ref dup;
	int64_t x = 0;

	ftest_assert_ok(ferry_ref_dup(r, &dup));
	ftest_assert_ok(ftest_get_int64(&dup, timeout_ms, &x, NULL, 0));
	return x;
}

FTEST(an_inline_object_comes_from_its_owner)
{
	int64_t x = 7;
	struct lent l;

	init_job();
	call("lend", &x, sizeof(x), &l, sizeof(l));
	ftest_assert_int_eq(get_int64(&l.ref, 30000), 7);
	ferry_shutdown();
}

FTEST(a_pending_object_is_waited_for_at_its_owner)
{
	int64_t ms = 2000; /* long enough that the first wait sees it pending */
	struct lent l;
	int ready = 0;

	init_job();
	call("lend_pending", &ms, sizeof(ms), &l, sizeof(l));
	/* ferry_wait asks the owner too: not ready yet, then ready. */
	ftest_assert_int_eq(ferry_wait(&l.ref, 1, 1, 0, &ready), 0);
	ftest_assert_int_eq(ready, 0);
	ftest_assert_int_eq(ferry_wait(&l.ref, 1, 1, 30000, &ready), 1);
	ftest_assert_int_eq(ready, 1);
	ftest_assert_int_eq(get_int64(&l.ref, 30000), 2000);
	ferry_shutdown();
}

/* The driver's add(20, 1) lives in the driver's memory store; a task given its ref (as
 * bytes: a borrow) passes it on to twice, whose worker asks the driver for it. */
FTEST(a_borrowed_ref_passes_on_to_a_subtask)
{
	int64_t a = 20, b = 1, got;
	struct ferry_arg args[2] = {{.data = &a, .len = sizeof(a)}, {.data = &b, .len = sizeof(b)}};
	struct ferry_ref r;

	init_job();
	ftest_assert_ok(ferry_submit("add", args, 2, NULL, &r));
	ftest_assert_int_eq(get_int64(&r, 30000), 21);
	call("pass_on", &r, sizeof(r), &got, sizeof(got));
	ftest_assert_int_eq(got, 42);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

FTEST(a_dead_owner_s_object_is_eownerdead_naming_it)
{
	char hex[FERRY_ID_HEX_MAX];
	struct ferry_view v;
	int64_t x = 5;
	struct lent l;

	init_job();
	call("lend", &x, sizeof(x), &l, sizeof(l));
	ftest_assert_int_eq(get_int64(&l.ref, 30000), 5);
	ftest_assert_ok(kill(l.pid, SIGKILL));
	for (int i = 0; i < 200 && kill(l.pid, 0) == 0; i++)
		usleep(50 * 1000); /* the node reaps it */
	ftest_assert_errno(ferry_get(&l.ref, 30000, &v), -EOWNERDEAD);
	ftest_log("get: %s", v.error);
	ferry_worker_id_to_hex(&l.ref.owner, hex, sizeof(hex));
	ftest_assert_ptr_notnull(strstr(v.error, hex));
	ferry_shutdown();
}

/* @ref's object goes once the borrower just killed is gone: the node sees the death, the
 * owner drops its count (up to 10 s). */
static void expect_freed_after_death(const struct ferry_ref *ref)
{
	struct ferry_view v;
	int ret = 0;

	for (int i = 0; i < 200; i++) {
		ret = ferry_get(ref, 0, &v);
		if (ret == -ENOENT)
			break;
		if (ret == 0)
			ferry_release(&v);
		usleep(50 * 1000);
	}
	ftest_assert_errno(ret, -ENOENT);
}

FTEST(a_borrowed_ref_keeps_the_object_alive_until_the_borrower_goes)
{
	struct ferry_ref r, keep;
	struct ferry_view v;
	int32_t pid;

	init_job();
	ftest_assert_ok(ferry_put("borrowed", 8, &r));
	call("stash", &r, sizeof(r), &pid, sizeof(pid));
	keep = r;
	ferry_ref_drop(&r); /* ours is gone; the worker's borrow holds it */
	ftest_assert_ok(ferry_get(&keep, 5000, &v));
	ftest_assert_mem_eq(v.data, "borrowed", 8);
	ferry_release(&v);
	ftest_assert_ok(kill(pid, SIGKILL)); /* the borrower dies: its count goes */
	expect_freed_after_death(&keep);
	ferry_shutdown();
}

/* ferry_put_refs: a container keeps the objects of the refs inside it alive; dropped, they go
 * unless a borrower kept one: a task given the container (by ref: its bytes are a ref) that
 * keeps the ref inside with ferry_ref_dup holds that object past the container, until it dies. */
FTEST(a_ref_stored_inside_another_object_keeps_it_alive)
{
	struct ferry_ref x, y, keep, foreign = {0};
	struct ferry_arg a;
	struct ferry_view v;
	struct ferry_ref r;
	int32_t pid;

	init_job();
	ftest_assert_ok(ferry_put("inner", 5, &x));
	ferry_worker_id_random(&foreign.owner);
	ftest_assert_errno(ferry_put_refs(&x, sizeof(x), &foreign, 1, &y), -EINVAL);
	ftest_assert_ok(ferry_put_refs(&x, sizeof(x), &x, 1, &y));
	keep = x;
	ferry_ref_drop(&x); /* the container's count holds it */
	ftest_assert_ok(ferry_get(&keep, 5000, &v));
	ftest_assert_mem_eq(v.data, "inner", 5);
	ferry_release(&v);
	a = (struct ferry_arg){.ref = &y};
	ftest_assert_ok(ferry_submit("stash", &a, 1, NULL, &r));
	ftest_assert_ok(ferry_get(&r, 60000, &v));
	memcpy(&pid, v.data, sizeof(pid));
	ferry_release(&v);
	ferry_ref_drop(&r);
	ferry_ref_drop(&y); /* the container goes; the borrower's count stays */
	ftest_assert_ok(ferry_get(&keep, 5000, &v));
	ferry_release(&v);
	ftest_assert_ok(kill(pid, SIGKILL));
	expect_freed_after_death(&keep);
	ferry_shutdown();
}

FTEST(a_dropped_container_drops_what_it_held)
{
	struct ferry_ref x, y, keep;
	struct ferry_view v;

	init_job();
	ftest_assert_ok(ferry_put("inner", 5, &x));
	ftest_assert_ok(ferry_put_refs(&x, sizeof(x), &x, 1, &y));
	keep = x;
	ferry_ref_drop(&x);
	ftest_assert_ok(ferry_get(&keep, 5000, &v));
	ferry_release(&v);
	ferry_ref_drop(&y);
	ftest_assert_errno(ferry_get(&keep, 0, &v), -ENOENT);
	ferry_shutdown();
}

/* The directory of this driver's owner socket ("o-<@self hex>.sock", its node's directory),
 * from the bound Unix sockets the kernel lists. */
static void owner_dir(const struct ferry_worker_id *self, char *out, size_t size)
{
	char hex[FERRY_ID_HEX_MAX], name[64], line[512];
	FILE *f = fopen("/proc/net/unix", "r");

	ftest_assert_ptr_notnull(f);
	ferry_worker_id_to_hex(self, hex, sizeof(hex));
	snprintf(name, sizeof(name), "/o-%s.sock", hex);
	out[0] = 0;
	while (!out[0] && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, name);

		if (at && strchr(line, '/'))
			snprintf(out, size, "%.*s", (int)(at - strchr(line, '/')),
				 strchr(line, '/'));
	}
	fclose(f);
	ftest_assert_true(out[0] != 0);
}

/* A fake owner: takes one connection, reads what the borrower sends, and answers with the
 * first 8 bytes of a 64-byte ObjectGetReply, then nothing. */
static void *half_owner(void *arg)
{
	int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
	uint8_t buf[FERRY_FRAME_HEADER_SIZE + 8] = {0}, in[512];

	if (fd < 0)
		return NULL;
	(void)recv(fd, in, sizeof(in), 0);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_OBJECT_GET_REPLY, 64);
	(void)send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
	*(int *)arg = fd; /* closed by the test once its wait returned */
	return NULL;
}

FTEST(a_wait_on_an_owner_that_sends_half_a_reply_ends_at_its_timeout)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct ferry_ref mine, ref = {0};
	char dir[sizeof(sa.sun_path)], hex[FERRY_ID_HEX_MAX];
	struct timespec t0, t1;
	int lfd, fd_or_conn, ready = -1, ret;
	pthread_t th;
	double s;

	init_job();
	ftest_assert_ok(ferry_put("x", 1, &mine)); /* its owner is this driver */
	owner_dir(&mine.owner, dir, sizeof(dir));
	ferry_worker_id_random(&ref.owner);
	ferry_object_id_random(&ref.id);
	ferry_worker_id_to_hex(&ref.owner, hex, sizeof(hex));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/o-%s.sock", dir, hex);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ftest_assert_true(lfd >= 0);
	ftest_assert_ok(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ftest_assert_ok(listen(lfd, 1));
	fd_or_conn = lfd;
	ftest_assert_ok(pthread_create(&th, NULL, half_owner, &fd_or_conn));

	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = ferry_wait(&ref, 1, 1, 200, &ready);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	ftest_log("ferry_wait returned %d after %.3f s", ret, s);
	/* Not ready, and not taken for an answer (a dead owner would count as one). */
	ftest_assert_int_eq(ret, 0);
	ftest_assert_int_eq(ready, 0);
	ftest_assert_true(s < 5.0); /* the owner's half reply did not hold it (it was 10 s) */

	shutdown(lfd, SHUT_RDWR); /* an accept still waiting returns */
	ftest_assert_ok(pthread_join(th, NULL));
	if (fd_or_conn != lfd)
		close(fd_or_conn);
	close(lfd);
	unlink(sa.sun_path);
	ferry_ref_drop(&mine);
	ferry_shutdown();
}
