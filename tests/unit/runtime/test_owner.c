/* SPDX-License-Identifier: Apache-2.0 */
/* The driver's side of the runtime on the local cluster ferry_init starts in this process:
 * put/get round trips (small and 64 MiB), create + seal, get timeouts, wait with some ready,
 * counts (the store's copy goes at the last drop), callbacks through the eventfd with epoll,
 * ferry_init twice, a name registered twice, and a shutdown that leaves no thread or fd. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/alloc.h"
#include "ftest.h"
#include "runtime/rt.h"

#define STORE_BYTES (128u << 20)

static void init_local(void)
{
	struct ferry_init_opts o = {.memory_bytes = STORE_BYTES};

	unsetenv("FERRY_ADDRESS");
	unsetenv("FERRY_CODE");
	ftest_assert_ok(ferry_init(&o));
}

static int store_has(const struct ferry_ref *ref)
{
	return ferry_plasma_client_contains(ferry__rt.store, &ref->id);
}

FTEST(calls_before_init_are_enotconn)
{
	struct ferry_ref r = {0};
	struct ferry_view v;

	ftest_assert_errno(ferry_put("x", 1, &r), -ENOTCONN);
	ftest_assert_errno(ferry_get(&r, 0, &v), -ENOTCONN);
	ftest_assert_errno(ferry_completion_fd(), -ENOTCONN);
}

FTEST(put_get_round_trip_small)
{
	static const char msg[] = "hello, ferry";
	struct ferry_ref r;
	struct ferry_view v;

	init_local();
	ftest_assert_ok(ferry_put(msg, sizeof(msg), &r));
	ftest_assert_true(ferry_worker_id_eq(&r.owner, &ferry__rt.self));
	ftest_assert_ok(ferry_get(&r, 1000, &v));
	ftest_assert_uint_eq(v.len, sizeof(msg));
	ftest_assert_mem_eq(v.data, msg, sizeof(msg));
	ferry_release(&v);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

FTEST(put_get_round_trip_64_mib_is_zero_copy)
{
	size_t len = 64u << 20;
	unsigned char *buf = malloc(len);
	struct ferry_view v, v2;
	struct ferry_ref r;

	ftest_assert_ptr_notnull(buf);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131 + (i >> 20));
	init_local();
	ftest_assert_ok(ferry_put(buf, len, &r));
	ftest_assert_ok(ferry_get(&r, 1000, &v));
	ftest_assert_uint_eq(v.len, len);
	ftest_assert_int_eq(memcmp(v.data, buf, len), 0);
	/* Two gets view the same bytes of the store: no copy was made for either. */
	ftest_assert_ok(ferry_get(&r, 1000, &v2));
	ftest_assert_ptr_eq(v.data, v2.data);
	ferry_release(&v2);
	ferry_release(&v);
	ferry_ref_drop(&r);
	ferry_shutdown();
	free(buf);
}

FTEST(create_seal_then_get)
{
	struct ferry_ref r;
	struct ferry_view v;
	void *buf;

	init_local();
	ftest_assert_ok(ferry_create(4096, &buf, &r));
	memset(buf, 0xab, 4096);
	ftest_assert_errno(ferry_get(&r, 20, &v), -ETIMEDOUT); /* not sealed yet */
	ftest_assert_ok(ferry_seal(&r));
	ftest_assert_ok(ferry_get(&r, 1000, &v));
	ftest_assert_uint_eq(v.len, 4096);
	ftest_assert_uint_eq(((const unsigned char *)v.data)[4095], 0xab);
	ferry_release(&v);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

FTEST(get_times_out)
{
	struct ferry_ref r;
	struct ferry_view v;
	void *buf;

	init_local();
	ftest_assert_ok(ferry_create(8, &buf, &r));
	ftest_assert_errno(ferry_get(&r, 0, &v), -ETIMEDOUT);
	ftest_assert_errno(ferry_get(&r, 30, &v), -ETIMEDOUT);
	ftest_assert_ptr_null(v.data);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

FTEST(wait_returns_the_ready_ones)
{
	struct ferry_ref r[3];
	int ready[3];
	void *buf;

	init_local();
	ftest_assert_ok(ferry_put("a", 1, &r[0]));
	ftest_assert_ok(ferry_create(8, &buf, &r[1]));
	ftest_assert_ok(ferry_create(8, &buf, &r[2]));
	ftest_assert_int_eq(ferry_wait(r, 3, 1, 1000, ready), 1);
	ftest_assert_int_eq(ferry_wait(r, 3, 3, 30, ready), 1); /* timeout: one of three */
	ftest_assert_true(ready[0] && !ready[1] && !ready[2]);
	ftest_assert_ok(ferry_seal(&r[2]));
	ftest_assert_int_eq(ferry_wait(r, 3, 2, 1000, ready), 2);
	ftest_assert_true(ready[0] && !ready[1] && ready[2]);
	ftest_assert_errno(ferry_wait(r, 3, 4, 0, ready), -EINVAL);
	for (int i = 0; i < 3; i++)
		ferry_ref_drop(&r[i]);
	ferry_shutdown();
}

FTEST(last_drop_deletes_from_the_store)
{
	struct ferry_ref r, r2, copy;
	struct ferry_view v;

	init_local();
	ftest_assert_ok(ferry_put("payload", 7, &r));
	ftest_assert_ok(ferry_ref_dup(&r, &r2));
	copy = r;
	ftest_assert_int_eq(store_has(&copy), 1);
	ferry_ref_drop(&r);
	ftest_assert_int_eq(store_has(&copy), 1); /* r2 still holds it */
	ftest_assert_ok(ferry_get(&r2, 1000, &v));
	ferry_release(&v);
	ferry_ref_drop(&r2);
	ftest_assert_int_eq(store_has(&copy), 0);
	ftest_assert_errno(ferry_get(&copy, 0, &v), -ENOENT);
	ftest_assert_errno(ferry_ref_dup(&copy, &r2), -ENOENT);
	ftest_assert_uint_eq(ferry__hashmap_count(&ferry__rt.objects), 0);
	ferry_shutdown();
}

static int cb_calls, cb_status = 1;

static void on_ready(void *arg, const struct ferry_ref *ref, int status)
{
	(void)ref;
	ftest_assert_ptr_eq(arg, &cb_calls);
	cb_calls++;
	cb_status = status;
}

FTEST(callbacks_run_through_the_eventfd)
{
	struct epoll_event ev = {.events = EPOLLIN}, out;
	struct ferry_ref r;
	int ep, fd;
	void *buf;

	init_local();
	fd = ferry_completion_fd();
	ftest_assert_int_ge(fd, 0);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ftest_assert_ok(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	ftest_assert_ok(ferry_create(16, &buf, &r));
	ftest_assert_ok(ferry_on_ready(&r, on_ready, &cb_calls));
	ftest_assert_int_eq(epoll_wait(ep, &out, 1, 20), 0); /* not ready: not readable */
	ftest_assert_ok(ferry_seal(&r));
	ftest_assert_int_eq(epoll_wait(ep, &out, 1, 5000), 1);
	ftest_assert_int_eq(cb_calls, 0); /* only on the caller's thread, in run_completions */
	ftest_assert_int_eq(ferry_run_completions(), 1);
	ftest_assert_int_eq(cb_calls, 1);
	ftest_assert_int_eq(cb_status, 0);
	ftest_assert_int_eq(epoll_wait(ep, &out, 1, 0), 0); /* drained */
	/* Already ready: due at once. */
	ftest_assert_ok(ferry_on_ready(&r, on_ready, &cb_calls));
	ftest_assert_int_eq(epoll_wait(ep, &out, 1, 0), 1);
	ftest_assert_int_eq(ferry_run_completions(), 1);
	ftest_assert_int_eq(cb_calls, 2);
	ftest_assert_int_eq(ferry_run_completions(), 0);
	close(ep);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

FTEST(init_twice_is_ealready)
{
	init_local();
	ftest_assert_errno(ferry_init(NULL), -EALREADY);
	ferry_shutdown();
	ferry_shutdown(); /* a second one is a no-op */
}

FTEST(missing_code_path_is_enoent)
{
	struct ferry_init_opts o = {.code_path = "/nonexistent/libjob.so"};

	ftest_assert_errno(ferry_init(&o), -ENOENT);
	ftest_assert_errno(ferry_put("x", 1, &(struct ferry_ref){0}), -ENOTCONN);
}

static int fn_a(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 0;
}

static int fn_b(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 1;
}

FTEST(a_name_registered_twice_fails_init)
{
	ftest_assert_ok(ferry_register_function("twice", fn_a));
	ftest_assert_errno(ferry_register_function("twice", fn_b), -EEXIST);
	ftest_assert_errno(ferry_init(NULL), -EEXIST);
	ftest_allow_leaks(); /* the registry keeps its names for the process's life */
}

FTEST(shutdown_leaves_no_thread_and_no_fd)
{
	int threads, fds;
	struct ferry_ref r;
	struct ferry_view v;

	/* Counted after one init and shutdown: a sanitizer starts a thread of its own at the
	 * process's first pthread_create, and it stays. */
	init_local();
	ferry_shutdown();
	threads = ftest_count_entries("/proc/self/task");
	fds = ftest_count_entries("/proc/self/fd") - 1;
	init_local();
	ftest_assert_int_gt(ftest_count_entries("/proc/self/task"), threads);
	ftest_assert_ok(ferry_put("x", 1, &r));
	ftest_assert_ok(ferry_get(&r, 1000, &v));
	ferry_release(&v);
	ferry_shutdown();
	ftest_assert_int_eq(ftest_count_entries("/proc/self/task"), threads);
	ftest_assert_int_eq(ftest_count_entries("/proc/self/fd") - 1, fds);
	/* And it starts again. */
	init_local();
	ferry_shutdown();
}

/* Every allocation failure of a put leaves nothing: no object in the table, no store copy.
 * (The countdown counts every thread's allocations, so the process-wide live count is not
 * compared: the embedded node's threads allocate meanwhile.) */
FTEST(put_under_allocation_failures_leaves_nothing)
{
	struct ferry_object_id id;
	struct ferry_ref r;
	int ret = -ENOMEM;

	init_local();
	ftest_assert_ok(ferry_put("warm", 4, &r)); /* the store client's lazy setup */
	ferry_ref_drop(&r);
	for (long n = 0; ret < 0 && n < 200; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry_put("data", 4, &r);
		ferry__alloc_fail_after(-1);
		if (ret == 0)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ferry_object_id_for_put(&ferry__rt.root_task, ferry__rt.put_seq, &id);
		ftest_assert_int_eq(ferry_plasma_client_contains(ferry__rt.store, &id), 0);
		ftest_assert_uint_eq(ferry__hashmap_count(&ferry__rt.objects), 0);
	}
	ftest_assert_ok(ret);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

/* Another owner's object that is not in the store: -EOWNERDEAD once the GCS says that owner
 * died, a wait (here until the timeout) while it lives. */
FTEST(a_dead_owner_s_object_is_eownerdead)
{
	struct ferry_gcs_worker_info w = {0};
	struct ferry_ref r = {0};
	struct ferry_view v;

	init_local();
	ferry_worker_id_random(&w.id);
	w.job = ferry__rt.job;
	w.node = ferry__rt.node;
	w.pid = 1;
	ftest_assert_int_ge(ferry_gcs_worker_add(ferry__rt.gcs, &w), 0);
	ferry_object_id_random(&r.id);
	r.owner = w.id;
	ftest_assert_errno(ferry_get(&r, 300, &v), -ETIMEDOUT); /* alive: it may still come */
	ftest_assert_int_ge(
		ferry_gcs_worker_dead(ferry__rt.gcs, &w.id, FERRY_GCS_EXIT_ERROR, "test"), 0);
	ftest_assert_errno(ferry_get(&r, 10000, &v), -EOWNERDEAD);
	ftest_assert_true(strstr(v.error, "owner") != NULL);
	ferry_shutdown();
}
