/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the client tests: a plasma server in a child process of the test (so that the
 * test's allocation counting and fault injection see only the client), connected clients. */
#ifndef FERRY_TEST_PLASMA_CLIENT_H
#define FERRY_TEST_PLASMA_CLIENT_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/plasma.h>

#include "plasma/server.h"
#include "plasma/store.h"
#include "plasma_test.h"

struct test_store {
	pid_t pid;	/* the server's process */
	char path[256]; /* its socket */
};

/* Serve @o (socket_path filled in here) in a child until SIGTERM. */
static inline void store_spawn(struct test_store *t, struct ferry__plasma_server_opts o)
{
	int ready[2];
	char b = 0;

	snprintf(t->path, sizeof(t->path), "%s/plasma.sock", ftest_tmpdir());
	o.socket_path = t->path;
	o.store_flags |= FERRY__PLASMA_STORE_NO_PREFAULT;
	ftest_assert_int_eq(pipe(ready), 0);
	t->pid = fork();
	ftest_assert_int_ge(t->pid, 0);
	if (t->pid == 0) {
		struct ferry__plasma_server *srv;
		sigset_t set;
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
		if (ferry__plasma_server_start_new(&o, &srv) < 0)
			_exit(3);
		if (write(ready[1], &b, 1) != 1)
			_exit(4);
		sigwait(&set, &sig);
		ferry__plasma_server_destroy(srv);
		_exit(0);
	}
	close(ready[1]);
	if (read(ready[0], &b, 1) != 1)
		FTEST__FAIL("the store did not start");
	close(ready[0]);
}

/* Stop the store; it must exit cleanly. */
static inline void store_stop(struct test_store *t)
{
	int status = 0;

	kill(t->pid, SIGTERM);
	ftest_assert_int_eq(waitpid(t->pid, &status, 0), t->pid);
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
}

static inline struct ferry_plasma_client *client_connect(const struct test_store *t)
{
	struct ferry_plasma_client *c = NULL;

	ftest_assert_ok(ferry_plasma_client_connect(t->path, NULL, &c));
	return c;
}

/* @size bytes of object @n's pattern (generation 0). */
static inline void fill_pattern(void *buf, uint64_t size, uint32_t n)
{
	memset(buf, pattern(n, 0), size);
}

static inline int pattern_intact(const void *buf, uint64_t size, uint32_t n)
{
	const uint8_t *p = buf;

	for (uint64_t i = 0; i < size; i++)
		if (p[i] != pattern(n, 0))
			return 0;
	return 1;
}

/* Create object @n of @size bytes (metadata: 4 bytes of @n), fill and seal it. */
static inline void client_put(struct ferry_plasma_client *c, uint32_t n, uint64_t size)
{
	struct ferry_object_id id = oid(n);
	void *data;

	ftest_assert_ok(ferry_plasma_client_create(c, &id, size, &n, sizeof(n), &data));
	fill_pattern(data, size, n);
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
}

/* Get object @n (waiting up to @timeout_ms) and check it. */
static inline void client_check(struct ferry_plasma_client *c, uint32_t n, uint64_t size,
				int64_t timeout_ms)
{
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_view v;
	uint32_t meta;

	ftest_assert_ok(ferry_plasma_client_get(c, &id, 1, timeout_ms, &v));
	ftest_assert_int_eq(v.status, 0);
	ftest_assert_uint_eq(v.data_size, size);
	ftest_assert_uint_eq(v.metadata_size, sizeof(meta));
	memcpy(&meta, v.metadata, sizeof(meta));
	ftest_assert_uint_eq(meta, n);
	ftest_assert_true(pattern_intact(v.data, size, n));
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
}

static inline struct ferry_plasma_stats client_stats(struct ferry_plasma_client *c)
{
	struct ferry_plasma_stats st;

	ftest_assert_ok(ferry_plasma_client_stats(c, &st));
	return st;
}

#endif
